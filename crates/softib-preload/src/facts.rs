//! What the preload library presents: the device table and the virtual tree under
//! `/dev/infiniband` and `/sys/class/infiniband`, as pure functions of a path.
//!
//! The tree of device `i` named `NAME` (device `i` of `softib_config::devices()`, the list
//! softib's `libibverbs.so.1` gives `ibv_get_device_list`):
//!
//! ```text
//! /dev/infiniband/                                   directory 0755
//! /dev/infiniband/uverbs<i>                          character device 231:(192 + i), 0666
//! /sys/class/infiniband/                             directory 0755
//! /sys/class/infiniband/NAME/                        directory 0755
//! /sys/class/infiniband/NAME/device/                 directory 0755
//! /sys/class/infiniband/NAME/device/numa_node        "-1\n"
//! /sys/class/infiniband/NAME/device/local_cpus       every CPU, as the kernel prints a cpumask
//! /sys/class/infiniband/NAME/device/driver           symlink to ../../../../bus/virtual/drivers/rdma_rxe
//! /sys/class/infiniband/NAME/ports/1/gid_attrs/types/0   "RoCE v2\n"
//! /sys/class/infiniband/NAME/ports/1/gid_attrs/types/1   "RoCE v2\n"
//! ```
//!
//! Everything else under the two roots (another device's node, `rdma_cm`, a real `rxe0`) is
//! not softib's and goes to the file system. The conventions are the kernel's: uverbs
//! character devices are major 231 from minor 192 (`IB_UVERBS_BASE_MINOR`) and world
//! read/write (rdma-core's udev rule); sysfs attributes are read-only (0444). The driver is
//! named as Linux's soft RoCE driver (rxe) is, `rdma_rxe`, which softib is wire-compatible
//! with and whose limits it advertises (docs/deviations.md).

use libc::c_int;

/// Most devices the table holds (`softib_config` lists more only from a long config file).
pub const MAX_DEVICES: usize = 64;
/// Room for a name: `softib_config::MAX_NAME_LEN` bytes.
const NAME_CAP: usize = softib_config::MAX_NAME_LEN;

/// Major number of the kernel's uverbs character devices (`IB_UVERBS_MAJOR`).
pub const UVERBS_MAJOR: u32 = 231;
/// Minor number of `uverbs0` (`IB_UVERBS_BASE_MINOR`).
pub const UVERBS_BASE_MINOR: u32 = 192;
/// The name of the driver `device/driver` links to.
pub const DRIVER_NAME: &str = "rdma_rxe";
/// The target of `device/driver`: a driver directory under `/sys/bus` as seen from
/// `/sys/class/infiniband/NAME/device`, ending in [`DRIVER_NAME`].
pub const DRIVER_LINK: &[u8] = b"../../../../bus/virtual/drivers/rdma_rxe";
/// What `ports/1/gid_attrs/types/<index>` holds for the port's two GIDs (the bound
/// address's and the link-local default GID): both are RoCE v2.
pub const GID_TYPE: &[u8] = b"RoCE v2\n";
/// What `device/numa_node` holds: no NUMA affinity.
pub const NUMA_NODE: &[u8] = b"-1\n";

/// The devices: names, and `uverbs<i>` by position.
pub struct Table {
    len: usize,
    names: [[u8; NAME_CAP]; MAX_DEVICES],
    name_lens: [usize; MAX_DEVICES],
}

impl Table {
    /// A table of up to [`MAX_DEVICES`] names, in order; longer names, names with a `/` and
    /// empty ones are left out (`softib_config` lists none).
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Box<Table> {
        let mut t = Box::new(Table {
            len: 0,
            names: [[0; NAME_CAP]; MAX_DEVICES],
            name_lens: [0; MAX_DEVICES],
        });
        for n in names {
            let b = n.as_bytes();
            if b.is_empty() || b.len() > NAME_CAP || b.contains(&b'/') || t.len == MAX_DEVICES {
                continue;
            }
            if let (Some(slot), Some(len)) = (t.names.get_mut(t.len), t.name_lens.get_mut(t.len)) {
                if let Some(dst) = slot.get_mut(..b.len()) {
                    dst.copy_from_slice(b);
                    *len = b.len();
                    t.len += 1;
                }
            }
        }
        t
    }

    /// How many devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn name(&self, i: usize) -> &[u8] {
        let len = self.name_lens.get(i).copied().unwrap_or(0);
        self.names
            .get(i)
            .and_then(|n| n.get(..len))
            .unwrap_or_default()
    }

    /// The device named `c`.
    fn by_name(&self, c: &[u8]) -> Option<usize> {
        (0..self.len).find(|&i| self.name(i) == c)
    }

    /// The device whose uverbs node is `c` (`uverbs<i>`, `i` in decimal without leading
    /// zeros, as the kernel names them).
    fn by_uverbs(&self, c: &[u8]) -> Option<usize> {
        let digits = c.strip_prefix(b"uverbs")?;
        if digits.is_empty()
            || digits.len() > 3
            || (digits.len() > 1 && digits.first() == Some(&b'0'))
        {
            return None;
        }
        let mut i = 0usize;
        for &d in digits {
            if !d.is_ascii_digit() {
                return None;
            }
            i = i * 10 + usize::from(d - b'0');
        }
        (i < self.len).then_some(i)
    }
}

/// A regular file of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum File {
    /// `device/numa_node`.
    NumaNode,
    /// `device/local_cpus`.
    LocalCpus,
    /// `ports/1/gid_attrs/types/0` and `types/1`.
    GidType,
}

/// A node of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// `/dev/infiniband/uverbs<i>`: the character device `231:(192 + i)`.
    CharDev {
        /// The minor number.
        minor: u32,
    },
    /// A read-only attribute file.
    File(File),
    /// `device/driver` ([`DRIVER_LINK`]).
    DriverLink,
}

impl Node {
    /// The `st_mode` of the node.
    pub fn mode(self) -> u32 {
        match self {
            Node::Dir => libc::S_IFDIR | 0o755,
            Node::CharDev { .. } => libc::S_IFCHR | 0o666,
            Node::File(_) => libc::S_IFREG | 0o444,
            Node::DriverLink => libc::S_IFLNK | 0o777,
        }
    }
}

/// What a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Not softib's: the file system answers.
    NotOurs,
    /// A node of the tree, and its inode number (stable for the path).
    Found(Node, u64),
    /// Under a softib device but absent (or through a file, or through the driver link, whose
    /// target does not exist): fails with this errno.
    Missing(c_int),
}

/// A child of a directory of a device's tree.
struct Entry {
    name: &'static [u8],
    node: Node,
    children: &'static [Entry],
}

const fn leaf(name: &'static [u8], node: Node) -> Entry {
    Entry {
        name,
        node,
        children: &[],
    }
}

const fn dir(name: &'static [u8], children: &'static [Entry]) -> Entry {
    Entry {
        name,
        node: Node::Dir,
        children,
    }
}

/// Below `/sys/class/infiniband/NAME`.
static DEVICE_TREE: &[Entry] = &[
    dir(
        b"device",
        &[
            leaf(b"numa_node", Node::File(File::NumaNode)),
            leaf(b"local_cpus", Node::File(File::LocalCpus)),
            leaf(b"driver", Node::DriverLink),
        ],
    ),
    dir(
        b"ports",
        &[dir(
            b"1",
            &[dir(
                b"gid_attrs",
                &[dir(
                    b"types",
                    &[
                        leaf(b"0", Node::File(File::GidType)),
                        leaf(b"1", Node::File(File::GidType)),
                    ],
                )],
            )],
        )],
    ),
];

/// FNV-1a, for inode numbers.
struct Ino(u64);

impl Ino {
    fn new() -> Ino {
        Ino(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, c: &[u8]) {
        for &b in b"/".iter().chain(c) {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn done(&self) -> u64 {
        self.0 | 1
    }
}

/// Looks `path` up. `follow`: a final `device/driver` is followed (stat, access, open), which
/// fails as its target does not exist; otherwise it is the link itself (lstat, readlink).
/// Only absolute paths are softib's; a path with a `..` component never is.
pub fn lookup(table: &Table, path: &[u8], follow: bool) -> Lookup {
    if path.first() != Some(&b'/') {
        return Lookup::NotOurs;
    }
    if path.split(|&b| b == b'/').any(|c| c == b"..") {
        return Lookup::NotOurs;
    }
    let trailing_slash = path.len() > 1 && path.last() == Some(&b'/');
    let mut comps = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".");
    let mut ino = Ino::new();
    let (node, rest_start) = match comps.next() {
        Some(b"dev") => {
            if comps.next() != Some(b"infiniband") {
                return Lookup::NotOurs;
            }
            ino.add(b"dev/infiniband");
            match comps.next() {
                None => return finish(Node::Dir, ino.done(), trailing_slash, follow),
                Some(c) => match table.by_uverbs(c) {
                    None => return Lookup::NotOurs,
                    Some(i) => {
                        ino.add(c);
                        let node = Node::CharDev {
                            minor: UVERBS_BASE_MINOR + i as u32,
                        };
                        if comps.next().is_some() {
                            return Lookup::Missing(libc::ENOTDIR);
                        }
                        return finish(node, ino.done(), trailing_slash, follow);
                    }
                },
            }
        }
        Some(b"sys") => {
            if comps.next() != Some(b"class") || comps.next() != Some(b"infiniband") {
                return Lookup::NotOurs;
            }
            ino.add(b"sys/class/infiniband");
            match comps.next() {
                None => return finish(Node::Dir, ino.done(), trailing_slash, follow),
                Some(c) => match table.by_name(c) {
                    None => return Lookup::NotOurs,
                    Some(_) => {
                        ino.add(c);
                        (Node::Dir, DEVICE_TREE)
                    }
                },
            }
        }
        _ => return Lookup::NotOurs,
    };
    let mut node = node;
    let mut children = rest_start;
    for c in comps {
        match node {
            Node::Dir => {}
            // Through the driver link: its target does not exist.
            Node::DriverLink => return Lookup::Missing(libc::ENOENT),
            Node::File(_) | Node::CharDev { .. } => return Lookup::Missing(libc::ENOTDIR),
        }
        let Some(e) = children.iter().find(|e| e.name == c) else {
            return Lookup::Missing(libc::ENOENT);
        };
        ino.add(c);
        node = e.node;
        children = e.children;
    }
    finish(node, ino.done(), trailing_slash, follow)
}

fn finish(node: Node, ino: u64, trailing_slash: bool, follow: bool) -> Lookup {
    match node {
        // A trailing slash follows the link too.
        Node::DriverLink if follow || trailing_slash => Lookup::Missing(libc::ENOENT),
        Node::Dir => Lookup::Found(node, ino),
        _ if trailing_slash => Lookup::Missing(libc::ENOTDIR),
        _ => Lookup::Found(node, ino),
    }
}

/// Room for a file's contents: a cpumask of 8 192 CPUs takes 2 304 bytes.
pub const CONTENT_CAP: usize = 2400;

/// Writes the contents of `f` into `buf`; returns their length.
pub fn contents(f: File, cpus: usize, buf: &mut [u8; CONTENT_CAP]) -> usize {
    let src: &[u8] = match f {
        File::NumaNode => NUMA_NODE,
        File::GidType => GID_TYPE,
        File::LocalCpus => return cpumask(cpus, buf),
    };
    copy_into(buf, src)
}

fn copy_into(buf: &mut [u8], src: &[u8]) -> usize {
    let n = src.len().min(buf.len());
    if let (Some(d), Some(s)) = (buf.get_mut(..n), src.get(..n)) {
        d.copy_from_slice(s);
    }
    n
}

/// The mask of CPUs `0..n` as the kernel prints a cpumask of `n` bits (`%*pb`): 32-bit
/// groups in hex, most significant first, separated by commas, each 8 digits wide but the
/// first, which has as many digits as its bits need; then a newline.
pub fn cpumask(n: usize, buf: &mut [u8]) -> usize {
    let n = n.clamp(1, 8192);
    let mut len = 0;
    let mut put = |b: u8, len: &mut usize| {
        if let Some(slot) = buf.get_mut(*len) {
            *slot = b;
            *len += 1;
        }
    };
    let groups = n.div_ceil(32);
    for g in (0..groups).rev() {
        let bits = if g == groups - 1 { n - 32 * g } else { 32 };
        let digits = bits.div_ceil(4);
        let value: u64 = (1u64 << bits) - 1;
        if g != groups - 1 {
            put(b',', &mut len);
        }
        for d in (0..digits).rev() {
            let nibble = ((value >> (4 * d)) & 0xF) as usize;
            put(
                b"0123456789abcdef".get(nibble).copied().unwrap_or(b'0'),
                &mut len,
            );
        }
    }
    put(b'\n', &mut len);
    len
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    fn t() -> Box<Table> {
        Table::new(["softib0", "rdma_x"])
    }

    fn found(path: &str, follow: bool) -> Node {
        match lookup(&t(), path.as_bytes(), follow) {
            Lookup::Found(n, _) => n,
            other => panic!("{path}: {other:?}"),
        }
    }

    fn missing(path: &str, follow: bool) -> c_int {
        match lookup(&t(), path.as_bytes(), follow) {
            Lookup::Missing(e) => e,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn the_tree() {
        assert_eq!(found("/dev/infiniband", true), Node::Dir);
        assert_eq!(found("/dev/infiniband/", true), Node::Dir);
        assert_eq!(
            found("/dev/infiniband/uverbs0", true),
            Node::CharDev { minor: 192 }
        );
        assert_eq!(
            found("//dev/./infiniband//uverbs1", true),
            Node::CharDev { minor: 193 }
        );
        assert_eq!(found("/sys/class/infiniband", true), Node::Dir);
        assert_eq!(found("/sys/class/infiniband/rdma_x", true), Node::Dir);
        assert_eq!(
            found("/sys/class/infiniband/softib0/device/", true),
            Node::Dir
        );
        assert_eq!(
            found("/sys/class/infiniband/softib0/device/numa_node", true),
            Node::File(File::NumaNode)
        );
        assert_eq!(
            found("/sys/class/infiniband/softib0/device/local_cpus", true),
            Node::File(File::LocalCpus)
        );
        assert_eq!(
            found(
                "/sys/class/infiniband/rdma_x/ports/1/gid_attrs/types/0",
                true
            ),
            Node::File(File::GidType)
        );
        assert_eq!(
            found("/sys/class/infiniband/softib0/device/driver", false),
            Node::DriverLink
        );
    }

    #[test]
    fn absent_nodes_of_a_device_fail() {
        assert_eq!(
            missing("/sys/class/infiniband/softib0/device/driver", true),
            libc::ENOENT
        );
        assert_eq!(
            missing("/sys/class/infiniband/softib0/device/driver/", false),
            libc::ENOENT
        );
        assert_eq!(
            missing("/sys/class/infiniband/softib0/device/driver/module", false),
            libc::ENOENT
        );
        assert_eq!(
            missing("/sys/class/infiniband/softib0/fw_ver", true),
            libc::ENOENT
        );
        assert_eq!(
            missing("/sys/class/infiniband/softib0/ports/2", true),
            libc::ENOENT
        );
        assert_eq!(
            found(
                "/sys/class/infiniband/softib0/ports/1/gid_attrs/types/1",
                true
            ),
            Node::File(File::GidType)
        );
        assert_eq!(
            missing(
                "/sys/class/infiniband/softib0/ports/1/gid_attrs/types/2",
                true
            ),
            libc::ENOENT
        );
        assert_eq!(
            missing("/sys/class/infiniband/softib0/device/numa_node/", true),
            libc::ENOTDIR
        );
        assert_eq!(
            missing("/sys/class/infiniband/softib0/device/numa_node/x", true),
            libc::ENOTDIR
        );
        assert_eq!(missing("/dev/infiniband/uverbs0/", true), libc::ENOTDIR);
        assert_eq!(missing("/dev/infiniband/uverbs0/x", true), libc::ENOTDIR);
    }

    #[test]
    fn other_paths_are_not_ours() {
        let t = t();
        for p in [
            "/",
            "",
            "dev/infiniband/uverbs0",
            "/dev",
            "/dev/infiniband/uverbs2",
            "/dev/infiniband/uverbs00",
            "/dev/infiniband/uverbs",
            "/dev/infiniband/uverbs-1",
            "/dev/infiniband/rdma_cm",
            "/sys/class/infiniband/rxe0",
            "/sys/class/infiniband/rxe0/device/driver",
            "/sys/class/infiniband_verbs/uverbs0",
            "/sys/class/net",
            "/sys/class/infiniband/softib0/../softib0",
            "/dev/infiniband/../infiniband/uverbs0",
            "/devx/infiniband",
            "/etc/passwd",
        ] {
            assert_eq!(lookup(&t, p.as_bytes(), true), Lookup::NotOurs, "{p}");
        }
    }

    #[test]
    fn inode_numbers_are_per_path() {
        let t = t();
        let ino = |p: &str| match lookup(&t, p.as_bytes(), false) {
            Lookup::Found(_, i) => i,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            ino("/dev/infiniband/uverbs0"),
            ino("/dev//infiniband/./uverbs0")
        );
        assert_ne!(
            ino("/dev/infiniband/uverbs0"),
            ino("/dev/infiniband/uverbs1")
        );
        assert_ne!(
            ino("/sys/class/infiniband/softib0/device"),
            ino("/sys/class/infiniband/rdma_x/device")
        );
        assert_ne!(ino("/sys/class/infiniband"), 0);
    }

    #[test]
    fn table_limits() {
        let long = "n".repeat(NAME_CAP + 1);
        let t = Table::new(["a", "", "b/c", long.as_str(), "d"]);
        assert_eq!(t.len(), 2);
        assert_eq!(t.by_name(b"d"), Some(1));
        assert_eq!(t.by_uverbs(b"uverbs1"), Some(1));
        let many: Vec<String> = (0..MAX_DEVICES + 5).map(|i| format!("d{i}")).collect();
        let t = Table::new(many.iter().map(String::as_str));
        assert_eq!(t.len(), MAX_DEVICES);
        assert_eq!(t.by_uverbs(b"uverbs63"), Some(63));
        assert_eq!(t.by_uverbs(b"uverbs64"), None);
    }

    #[test]
    fn cpumask_as_the_kernel_prints_it() {
        let s = |n| {
            let mut b = [0u8; CONTENT_CAP];
            let len = cpumask(n, &mut b);
            String::from_utf8(b[..len].to_vec()).unwrap()
        };
        assert_eq!(s(1), "1\n");
        assert_eq!(s(2), "3\n");
        assert_eq!(s(8), "ff\n");
        assert_eq!(s(32), "ffffffff\n");
        assert_eq!(s(33), "1,ffffffff\n");
        assert_eq!(s(40), "ff,ffffffff\n");
        assert_eq!(s(64), "ffffffff,ffffffff\n");
        assert_eq!(s(8192).len(), 256 * 9);
    }

    #[test]
    fn file_contents() {
        let mut b = [0u8; CONTENT_CAP];
        let n = contents(File::GidType, 4, &mut b);
        assert_eq!(&b[..n], b"RoCE v2\n");
        let n = contents(File::NumaNode, 4, &mut b);
        assert_eq!(&b[..n], b"-1\n");
        let n = contents(File::LocalCpus, 4, &mut b);
        assert_eq!(&b[..n], b"f\n");
        assert!(DRIVER_LINK.ends_with(DRIVER_NAME.as_bytes()));
    }
}
