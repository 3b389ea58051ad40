//! The preload library of `softib run` (`libsoftib_preload.so`, first on `LD_PRELOAD`).
//!
//! Middleware decides whether an RDMA device is usable from the file system, not only from
//! libibverbs: UCX keeps a verbs device only if `/dev/infiniband/<dev_name>` is a character
//! device it may read and write, and reads the type of each GID from
//! `/sys/class/infiniband/<name>/ports/<port>/gid_attrs/types/<index>` (without it every GID is
//! RoCE v1); Open MPI's UCX component reads the driver behind
//! `/sys/class/infiniband/<name>/device/driver`. softib's devices have no such files, and
//! making them would take root. This library answers those questions for softib's devices
//! and passes everything else to libc: it interposes the stat family (`stat`, `lstat`,
//! `fstatat`, their `64` twins, the `__xstat` forms of binaries built before glibc 2.33,
//! `statx`), the access family (`access`, `faccessat`, `euidaccess`, `eaccess`), the open
//! family (`open`, `openat`, their `64` twins and `_2` fortified forms, `fopen`,
//! `fopen64`) and the readlink family (`readlink`, `readlinkat`, their fortified `_chk`
//! forms), and only for the paths [`facts`] describes. Directories are not listed
//! (`opendir` is libc's own).
//!
//! The devices are `softib_config::devices()`, read once when the library is loaded (the
//! list softib's libibverbs reads from the same environment), so every process a launcher
//! starts under `softib run` sees the devices its libibverbs will list.
//!
//! When a process of the run exits, the library removes what killed softib processes of the
//! user left in `/dev/shm` (`softib_udp::host::sweep_dead_files`): a launcher outlives the
//! ranks it killed.
//!
//! An interposed function never allocates, never holds a lock and never panics into the
//! program: a path outside the two roots costs a prefix test and a cached call through
//! `dlsym(RTLD_NEXT)`; a file of the tree is opened as a sealed memfd holding its contents.

pub mod facts;

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use facts::{Lookup, Node, Table};

static TABLE: OnceLock<Box<Table>> = OnceLock::new();

thread_local! {
    /// Set while this thread reads the device list: its own file accesses are libc's.
    static LOADING: Cell<bool> = const { Cell::new(false) };
}

/// The device table, read on first use (the constructor uses it first).
fn table() -> &'static Table {
    TABLE.get_or_init(|| {
        LOADING.with(|l| l.set(true));
        let specs = softib_config::devices();
        LOADING.with(|l| l.set(false));
        Table::new(specs.iter().map(|d| d.name.as_str()))
    })
}

/// Reads the device list when the library is loaded (before `main`, or at `dlopen`), so that
/// no interposed call does it.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[cfg(not(test))]
extern "C" fn init() {
    let _ = std::panic::catch_unwind(|| {
        table();
    });
    // SAFETY: registers a handler that only looks at and removes softib's files in /dev/shm.
    unsafe { libc::atexit(sweep_at_exit) };
}

/// When a process of the run exits: removes what processes of this user that died without
/// leaving (killed by a signal) left in `/dev/shm`, their shared-memory inboxes and the host
/// tables of which no member lives. A launcher outlives its ranks (`softib run -- mpirun`):
/// when a launcher kills the ranks of a failed job (SIGTERM, SIGKILL), no exit handler of
/// theirs runs and no member of the host is left to notice, and its own exit removes their
/// files. Registered first, it runs after the exit handlers of softib's libibverbs (which
/// remove the process's own files).
#[cfg(not(test))]
extern "C" fn sweep_at_exit() {
    let _ = std::panic::catch_unwind(softib_udp::host::sweep_dead_files);
}

/// A libc function found by `dlsym(RTLD_NEXT)`, cached.
struct Real {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Real {
    const fn new(name: &'static CStr) -> Real {
        Real {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    fn get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Acquire);
        if a != 0 {
            return Some(a);
        }
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT is relative to this library.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        if p == 0 {
            return None;
        }
        self.addr.store(p, Ordering::Release);
        Some(p)
    }
}

/// The next definition of a libc function, as a function pointer of the given type.
macro_rules! real {
    ($name:literal as $ty:ty) => {{
        static R: Real = Real::new($name);
        // SAFETY: the symbol is the libc function of that name, whose C type is `$ty`.
        R.get()
            .map(|a| unsafe { std::mem::transmute::<usize, $ty>(a) })
    }};
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// -1 with errno `e`.
fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// What `path` is, if softib's; `None` for every other path (and if anything went wrong:
/// libc answers then).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn ours(path: *const c_char, follow: bool) -> Option<Lookup> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller's NUL-terminated path.
    let b = unsafe { CStr::from_ptr(path) }.to_bytes();
    if !under_a_root(b) || LOADING.with(Cell::get) {
        return None;
    }
    std::panic::catch_unwind(AssertUnwindSafe(|| facts::lookup(table(), b, follow)))
        .ok()
        .filter(|l| *l != Lookup::NotOurs)
}

/// The cheap test every path takes: does it begin with `/dev/` or `/sys/` (slashes
/// repeated or not)?
fn under_a_root(b: &[u8]) -> bool {
    if b.first() != Some(&b'/') {
        return false;
    }
    let start = b.iter().position(|&c| c != b'/').unwrap_or(b.len());
    let head = b.get(start..).unwrap_or_default();
    head.starts_with(b"dev/") || head.starts_with(b"sys/") || head == b"dev" || head == b"sys"
}

const _: () = assert!(std::mem::size_of::<libc::stat>() == std::mem::size_of::<libc::stat64>());

fn st_size(node: Node) -> i64 {
    match node {
        // sysfs reports a page for every attribute.
        Node::File(_) => 4096,
        Node::DriverLink => facts::DRIVER_LINK.len() as i64,
        Node::Dir | Node::CharDev { .. } => 0,
    }
}

fn st_nlink(node: Node) -> u32 {
    if node == Node::Dir {
        2
    } else {
        1
    }
}

fn rdev(node: Node) -> (u32, u32) {
    match node {
        Node::CharDev { minor } => (facts::UVERBS_MAJOR, minor),
        _ => (0, 0),
    }
}

/// Fills `*st` for a node of the tree (owner root, times zero).
///
/// # Safety
/// `st` is NULL or points to a `struct stat`.
unsafe fn fill_stat(node: Node, ino: u64, st: *mut libc::stat) -> c_int {
    if st.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's buffer, all of whose fields are plain integers.
    unsafe {
        std::ptr::write_bytes(st, 0, 1);
        let s = &mut *st;
        s.st_ino = ino as _;
        s.st_mode = node.mode() as _;
        s.st_nlink = st_nlink(node) as _;
        let (major, minor) = rdev(node);
        s.st_rdev = libc::makedev(major, minor);
        s.st_size = st_size(node) as _;
        s.st_blksize = 4096;
    }
    0
}

/// The stat family: the node's facts, or the lookup's errno.
///
/// # Safety
/// `st` is NULL or points to a `struct stat`.
unsafe fn stat_of(l: Lookup, st: *mut libc::stat) -> c_int {
    match l {
        // SAFETY: as the caller's.
        Lookup::Found(node, ino) => unsafe { fill_stat(node, ino, st) },
        Lookup::Missing(e) => fail(e),
        Lookup::NotOurs => fail(libc::ENOENT),
    }
}

fn follows(flags: c_int) -> bool {
    flags & libc::AT_SYMLINK_NOFOLLOW == 0
}

type StatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
type Stat64Fn = unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int;
type FstatatFn = unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
type Fstatat64Fn = unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
type XstatFn = unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat) -> c_int;
type Xstat64Fn = unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat64) -> c_int;
type FxstatatFn =
    unsafe extern "C" fn(c_int, c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
type Fxstatat64Fn =
    unsafe extern "C" fn(c_int, c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
type StatxFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;

/// Calls the next definition, or fails with ENOSYS where libc has none.
macro_rules! forward {
    ($name:literal as $ty:ty, $fail:expr; $($arg:expr),*) => {
        match real!($name as $ty) {
            // SAFETY: the program's own arguments, passed on unchanged.
            Some(f) => unsafe { f($($arg),*) },
            None => {
                set_errno(libc::ENOSYS);
                $fail
            }
        }
    };
}

/// `stat(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, true) } {
        return unsafe { stat_of(l, buf) };
    }
    forward!(c"stat" as StatFn, -1; path, buf)
}

/// `stat64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: libc's contract; `stat64` is `stat` on this ABI.
    if let Some(l) = unsafe { ours(path, true) } {
        return unsafe { stat_of(l, buf.cast()) };
    }
    forward!(c"stat64" as Stat64Fn, -1; path, buf)
}

/// `lstat(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, false) } {
        return unsafe { stat_of(l, buf) };
    }
    forward!(c"lstat" as StatFn, -1; path, buf)
}

/// `lstat64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, false) } {
        return unsafe { stat_of(l, buf.cast()) };
    }
    forward!(c"lstat64" as Stat64Fn, -1; path, buf)
}

/// `fstatat(2)` (only absolute paths can be softib's, whatever `dirfd` is).
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, follows(flags)) } {
        return unsafe { stat_of(l, buf) };
    }
    forward!(c"fstatat" as FstatatFn, -1; dirfd, path, buf, flags)
}

/// `fstatat64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, follows(flags)) } {
        return unsafe { stat_of(l, buf.cast()) };
    }
    forward!(c"fstatat64" as Fstatat64Fn, -1; dirfd, path, buf, flags)
}

/// `__xstat`: `stat` of binaries built before glibc 2.33.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, true) } {
        return unsafe { stat_of(l, buf) };
    }
    forward!(c"__xstat" as XstatFn, -1; ver, path, buf)
}

/// `__xstat64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __xstat64(
    ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, true) } {
        return unsafe { stat_of(l, buf.cast()) };
    }
    forward!(c"__xstat64" as Xstat64Fn, -1; ver, path, buf)
}

/// `__lxstat`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, false) } {
        return unsafe { stat_of(l, buf) };
    }
    forward!(c"__lxstat" as XstatFn, -1; ver, path, buf)
}

/// `__lxstat64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __lxstat64(
    ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, false) } {
        return unsafe { stat_of(l, buf.cast()) };
    }
    forward!(c"__lxstat64" as Xstat64Fn, -1; ver, path, buf)
}

/// `__fxstatat`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __fxstatat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, follows(flags)) } {
        return unsafe { stat_of(l, buf) };
    }
    forward!(c"__fxstatat" as FxstatatFn, -1; ver, dirfd, path, buf, flags)
}

/// `__fxstatat64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __fxstatat64(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, follows(flags)) } {
        return unsafe { stat_of(l, buf.cast()) };
    }
    forward!(c"__fxstatat64" as Fxstatat64Fn, -1; ver, dirfd, path, buf, flags)
}

/// `statx(2)`: the basic fields, whatever `mask` asks.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, follows(flags)) } {
        return match l {
            Lookup::Found(node, ino) => {
                if buf.is_null() {
                    return fail(libc::EFAULT);
                }
                // SAFETY: the caller's buffer, plain integers.
                unsafe {
                    std::ptr::write_bytes(buf, 0, 1);
                    let s = &mut *buf;
                    s.stx_mask = libc::STATX_BASIC_STATS;
                    s.stx_blksize = 4096;
                    s.stx_nlink = st_nlink(node);
                    s.stx_mode = node.mode() as u16;
                    s.stx_ino = ino;
                    s.stx_size = st_size(node) as u64;
                    let (major, minor) = rdev(node);
                    s.stx_rdev_major = major;
                    s.stx_rdev_minor = minor;
                }
                0
            }
            Lookup::Missing(e) => fail(e),
            Lookup::NotOurs => fail(libc::ENOENT),
        };
    }
    forward!(c"statx" as StatxFn, -1; dirfd, path, flags, mask, buf)
}

/// The access family: `mode` against the node's permissions (owner root), as the kernel
/// checks them for the real (`effective` false) or effective user.
fn access_of(l: Lookup, mode: c_int, effective: bool) -> c_int {
    let node = match l {
        Lookup::Found(node, _) => node,
        Lookup::Missing(e) => return fail(e),
        Lookup::NotOurs => return fail(libc::ENOENT),
    };
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: no arguments.
    let uid = unsafe {
        if effective {
            libc::geteuid()
        } else {
            libc::getuid()
        }
    };
    let perms = node.mode() & 0o777;
    let want = (mode & 0o7) as u32;
    let ok = if uid == 0 {
        // Read and write are always granted; execute needs an execute bit.
        want & 1 == 0 || perms & 0o111 != 0
    } else {
        perms & 0o7 & want == want
    };
    if ok {
        0
    } else {
        fail(libc::EACCES)
    }
}

type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type FaccessatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int;

/// `access(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, true) } {
        return access_of(l, mode, false);
    }
    forward!(c"access" as AccessFn, -1; path, mode)
}

/// `faccessat(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, follows(flags)) } {
        return access_of(l, mode, flags & libc::AT_EACCESS != 0);
    }
    forward!(c"faccessat" as FaccessatFn, -1; dirfd, path, mode, flags)
}

/// `euidaccess`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, true) } {
        return access_of(l, mode, true);
    }
    forward!(c"euidaccess" as AccessFn, -1; path, mode)
}

/// `eaccess`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, true) } {
        return access_of(l, mode, true);
    }
    forward!(c"eaccess" as AccessFn, -1; path, mode)
}

/// A sealed memfd holding `data`, at offset 0.
fn memfd_with(data: &[u8], cloexec: bool) -> c_int {
    let mut flags = libc::MFD_ALLOW_SEALING;
    if cloexec {
        flags |= libc::MFD_CLOEXEC;
    }
    // SAFETY: a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"softib-sysfs".as_ptr(), flags) };
    if fd < 0 {
        return -1;
    }
    // SAFETY: `data` is readable for its length; `fd` is ours.
    let n = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), 0) };
    if n < 0 || n as usize != data.len() {
        let e = if n < 0 { errno() } else { libc::EIO };
        // SAFETY: closes the descriptor made above.
        unsafe { libc::close(fd) };
        return fail(e);
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our descriptor. A failure leaves it writable, nothing worse.
    unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) };
    fd
}

/// The open family on a softib path: `None` to let libc open it (a directory: libc opens the
/// real one if there is one).
fn open_of(l: Lookup, flags: c_int) -> Option<c_int> {
    let node = match l {
        Lookup::Found(node, _) => node,
        Lookup::Missing(libc::ENOENT) if flags & libc::O_CREAT != 0 => {
            return Some(fail(libc::EACCES))
        }
        Lookup::Missing(e) => return Some(fail(e)),
        Lookup::NotOurs => return None,
    };
    let r = match node {
        Node::Dir => return None,
        Node::DriverLink if flags & libc::O_NOFOLLOW != 0 => fail(libc::ELOOP),
        // The link's target does not exist.
        Node::DriverLink => fail(libc::ENOENT),
        _ if flags & libc::O_DIRECTORY != 0 => fail(libc::ENOTDIR),
        _ if flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL => {
            fail(libc::EEXIST)
        }
        // The uverbs device of a kernel without its driver.
        Node::CharDev { .. } => fail(libc::ENXIO),
        Node::File(_)
            if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 =>
        {
            fail(libc::EACCES)
        }
        Node::File(f) => {
            let mut buf = [0u8; facts::CONTENT_CAP];
            // SAFETY: no arguments.
            let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as usize;
            let n = facts::contents(f, cpus, &mut buf);
            memfd_with(
                buf.get(..n).unwrap_or_default(),
                flags & libc::O_CLOEXEC != 0,
            )
        }
    };
    Some(r)
}

/// [`open_of`] for a path, guarded: `None` to let libc do it.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn open_ours(path: *const c_char, flags: c_int) -> Option<c_int> {
    // SAFETY: as the caller's.
    let l = unsafe { ours(path, false) }?;
    std::panic::catch_unwind(|| open_of(l, flags)).unwrap_or_else(|_| Some(fail(libc::EIO)))
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type Openat2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;

// `open` and `openat` are variadic in C; the mode is read as the third (fourth) integer
// argument, which is where a variadic caller puts it on x86-64 and AArch64 Linux, and is only
// meaningful (and only passed on) with O_CREAT or O_TMPFILE, as libc itself reads it.

/// `open(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"open" as OpenFn, -1; path, flags, mode as c_uint)
}

/// `open64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"open64" as OpenFn, -1; path, flags, mode as c_uint)
}

/// `openat(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"openat" as OpenatFn, -1; dirfd, path, flags, mode as c_uint)
}

/// `openat64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"openat64" as OpenatFn, -1; dirfd, path, flags, mode as c_uint)
}

/// `__open_2` (`open` of a program built with `_FORTIFY_SOURCE`).
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"__open_2" as Open2Fn, -1; path, flags)
}

/// `__open64_2`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"__open64_2" as Open2Fn, -1; path, flags)
}

/// `__openat_2`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"__openat_2" as Openat2Fn, -1; dirfd, path, flags)
}

/// `__openat64_2`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: libc's contract.
    if let Some(r) = unsafe { open_ours(path, flags) } {
        return r;
    }
    forward!(c"__openat64_2" as Openat2Fn, -1; dirfd, path, flags)
}

/// The `open(2)` flags of an `fopen` mode (`r`, `w`, `a`, with `+`, `e`, `x`), or `None`
/// for a mode fopen refuses.
///
/// # Safety
/// `mode` is a NUL-terminated string.
unsafe fn fopen_flags(mode: *const c_char) -> Option<c_int> {
    if mode.is_null() {
        return None;
    }
    // SAFETY: as the caller's.
    let m = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let plus = m.contains(&b'+');
    let mut flags = match (m.first(), plus) {
        (Some(b'r'), false) => libc::O_RDONLY,
        (Some(b'r'), true) => libc::O_RDWR,
        (Some(b'w'), p) => {
            (if p { libc::O_RDWR } else { libc::O_WRONLY }) | libc::O_CREAT | libc::O_TRUNC
        }
        (Some(b'a'), p) => {
            (if p { libc::O_RDWR } else { libc::O_WRONLY }) | libc::O_CREAT | libc::O_APPEND
        }
        _ => return None,
    };
    if m.contains(&b'e') {
        flags |= libc::O_CLOEXEC;
    }
    if m.contains(&b'x') {
        flags |= libc::O_EXCL;
    }
    Some(flags)
}

type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;

/// `fopen` on a softib path: the stream of [`open_of`]'s descriptor.
///
/// # Safety
/// libc's contract.
unsafe fn fopen_ours(path: *const c_char, mode: *const c_char) -> Option<*mut libc::FILE> {
    // SAFETY: libc's contract.
    let l = unsafe { ours(path, false) }?;
    // SAFETY: as the caller's.
    let Some(flags) = (unsafe { fopen_flags(mode) }) else {
        set_errno(libc::EINVAL);
        return Some(std::ptr::null_mut());
    };
    let fd =
        std::panic::catch_unwind(|| open_of(l, flags)).unwrap_or_else(|_| Some(fail(libc::EIO)))?;
    if fd < 0 {
        return Some(std::ptr::null_mut());
    }
    // SAFETY: our descriptor and the caller's mode string.
    let f = unsafe { libc::fdopen(fd, mode) };
    if f.is_null() {
        let e = errno();
        // SAFETY: closes the descriptor made above.
        unsafe { libc::close(fd) };
        set_errno(e);
    }
    Some(f)
}

/// `fopen(3)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: libc's contract.
    if let Some(f) = unsafe { fopen_ours(path, mode) } {
        return f;
    }
    forward!(c"fopen" as FopenFn, std::ptr::null_mut(); path, mode)
}

/// `fopen64`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: libc's contract.
    if let Some(f) = unsafe { fopen_ours(path, mode) } {
        return f;
    }
    forward!(c"fopen64" as FopenFn, std::ptr::null_mut(); path, mode)
}

/// The readlink family on a softib path: the driver link's target, EINVAL for anything
/// else (not a link).
///
/// # Safety
/// `buf` is writable for `size` bytes.
unsafe fn readlink_of(l: Lookup, buf: *mut c_char, size: usize) -> isize {
    match l {
        Lookup::Found(Node::DriverLink, _) => {
            if size == 0 {
                return fail(libc::EINVAL) as isize;
            }
            if buf.is_null() {
                return fail(libc::EFAULT) as isize;
            }
            let n = facts::DRIVER_LINK.len().min(size);
            // SAFETY: the caller's buffer, writable for `size` >= n bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(facts::DRIVER_LINK.as_ptr(), buf.cast::<u8>(), n)
            };
            n as isize
        }
        Lookup::Found(..) => fail(libc::EINVAL) as isize,
        Lookup::Missing(e) => fail(e) as isize,
        Lookup::NotOurs => fail(libc::ENOENT) as isize,
    }
}

type ReadlinkFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> isize;
type ReadlinkatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_char, usize) -> isize;
type ReadlinkChkFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize, usize) -> isize;
type ReadlinkatChkFn =
    unsafe extern "C" fn(c_int, *const c_char, *mut c_char, usize, usize) -> isize;

/// `readlink(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: usize) -> isize {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, false) } {
        return unsafe { readlink_of(l, buf, size) };
    }
    forward!(c"readlink" as ReadlinkFn, -1; path, buf, size)
}

/// `readlinkat(2)`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> isize {
    // SAFETY: libc's contract.
    if let Some(l) = unsafe { ours(path, false) } {
        return unsafe { readlink_of(l, buf, size) };
    }
    forward!(c"readlinkat" as ReadlinkatFn, -1; dirfd, path, buf, size)
}

/// `__readlink_chk` (`readlink` of a program built with `_FORTIFY_SOURCE`); a length past
/// the buffer goes to libc, which stops the program as fortification does.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
    buflen: usize,
) -> isize {
    if size <= buflen {
        // SAFETY: libc's contract.
        if let Some(l) = unsafe { ours(path, false) } {
            return unsafe { readlink_of(l, buf, size) };
        }
    }
    forward!(c"__readlink_chk" as ReadlinkChkFn, -1; path, buf, size, buflen)
}

/// `__readlinkat_chk`.
///
/// # Safety
/// libc's contract.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
    buflen: usize,
) -> isize {
    if size <= buflen {
        // SAFETY: libc's contract.
        if let Some(l) = unsafe { ours(path, false) } {
            return unsafe { readlink_of(l, buf, size) };
        }
    }
    forward!(c"__readlinkat_chk" as ReadlinkatChkFn, -1; dirfd, path, buf, size, buflen)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    //! The interposed functions called directly (in this test binary they are not exported),
    //! with a table of two devices, `softib0` and `lab1`.
    use super::*;

    fn setup() {
        let t = TABLE.get_or_init(|| Table::new(["softib0", "lab1"]));
        assert_eq!(t.len(), 2, "another test set a different table");
    }

    fn st(path: &CStr) -> Result<libc::stat, c_int> {
        setup();
        let mut s: libc::stat = unsafe { std::mem::zeroed() };
        match unsafe { stat(path.as_ptr(), &mut s) } {
            0 => Ok(s),
            _ => Err(errno()),
        }
    }

    fn read_all(path: &CStr) -> Result<Vec<u8>, c_int> {
        setup();
        let fd = unsafe { open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(errno());
        }
        let mut buf = vec![0u8; 8192];
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        unsafe { libc::close(fd) };
        assert!(n >= 0);
        buf.truncate(n as usize);
        Ok(buf)
    }

    #[test]
    fn uverbs_is_a_read_write_character_device() {
        let s = st(c"/dev/infiniband/uverbs1").unwrap();
        assert_eq!(s.st_mode & libc::S_IFMT, libc::S_IFCHR);
        assert_eq!((libc::major(s.st_rdev), libc::minor(s.st_rdev)), (231, 193));
        assert_eq!(
            unsafe { access(c"/dev/infiniband/uverbs1".as_ptr(), libc::R_OK | libc::W_OK) },
            0
        );
        assert_eq!(
            st(c"/dev/infiniband").unwrap().st_mode & libc::S_IFMT,
            libc::S_IFDIR
        );
        // Not a device of the table: the file system's answer.
        assert_eq!(st(c"/dev/infiniband/uverbs2").err(), Some(libc::ENOENT));
        // Opening it is refused: there is no kernel driver behind it.
        let fd = unsafe { open(c"/dev/infiniband/uverbs0".as_ptr(), libc::O_RDWR, 0) };
        assert_eq!((fd, errno()), (-1, libc::ENXIO));
    }

    #[test]
    fn sysfs_files_read_as_the_kernel_writes_them() {
        assert_eq!(
            read_all(c"/sys/class/infiniband/lab1/ports/1/gid_attrs/types/0").unwrap(),
            b"RoCE v2\n"
        );
        assert_eq!(
            read_all(c"/sys/class/infiniband/softib0/device/numa_node").unwrap(),
            b"-1\n"
        );
        let cpus = read_all(c"/sys/class/infiniband/softib0/device/local_cpus").unwrap();
        assert!(cpus.ends_with(b"\n") && cpus.len() > 1, "{cpus:?}");
        assert_eq!(
            read_all(c"/sys/class/infiniband/softib0/ports/1/gid_attrs/types/1").unwrap(),
            b"RoCE v2\n"
        );
        assert_eq!(
            read_all(c"/sys/class/infiniband/softib0/ports/1/gid_attrs/types/2").err(),
            Some(libc::ENOENT)
        );
        let s = st(c"/sys/class/infiniband/softib0/device/numa_node").unwrap();
        assert_eq!(s.st_mode, libc::S_IFREG | 0o444);
    }

    #[test]
    fn sysfs_files_are_read_only() {
        setup();
        let p = c"/sys/class/infiniband/softib0/device/numa_node";
        let fd = unsafe { open(p.as_ptr(), libc::O_WRONLY, 0) };
        assert_eq!((fd, errno()), (-1, libc::EACCES));
        let fd = unsafe { open(p.as_ptr(), libc::O_RDONLY, 0) };
        assert!(fd >= 0);
        let n = unsafe { libc::write(fd, b"0\n".as_ptr().cast(), 2) };
        assert_eq!((n, errno()), (-1, libc::EPERM));
        unsafe { libc::close(fd) };
        let f = unsafe { fopen(p.as_ptr(), c"w".as_ptr()) };
        assert!(f.is_null());
        assert_eq!(errno(), libc::EACCES);
        let f = unsafe { fopen(p.as_ptr(), c"re".as_ptr()) };
        assert!(!f.is_null());
        let mut line = [0u8; 16];
        let got = unsafe { libc::fgets(line.as_mut_ptr().cast(), 16, f) };
        assert!(!got.is_null());
        assert_eq!(&line[..4], b"-1\n\0");
        unsafe { libc::fclose(f) };
        let fd = unsafe {
            open(
                c"/sys/class/infiniband/softib0/device/new".as_ptr(),
                libc::O_WRONLY | libc::O_CREAT,
                0o644,
            )
        };
        assert_eq!((fd, errno()), (-1, libc::EACCES));
    }

    #[test]
    fn the_driver_link() {
        setup();
        let p = c"/sys/class/infiniband/softib0/device/driver";
        let mut buf = [0 as c_char; 256];
        let n = unsafe { readlink(p.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        assert!(n > 0);
        let target: Vec<u8> = buf[..n as usize].iter().map(|&c| c as u8).collect();
        assert_eq!(target, facts::DRIVER_LINK);
        // Truncated to the buffer, as readlink(2) does.
        let n = unsafe { readlink(p.as_ptr(), buf.as_mut_ptr(), 4) };
        assert_eq!(n, 4);
        let mut s: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { lstat(p.as_ptr(), &mut s) }, 0);
        assert_eq!(s.st_mode & libc::S_IFMT, libc::S_IFLNK);
        // Followed, it leads nowhere (no such driver directory exists).
        assert_eq!(st(p).err(), Some(libc::ENOENT));
        let dir = c"/sys/class/infiniband/softib0/device";
        let n = unsafe { readlink(dir.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        assert_eq!((n, errno()), (-1, libc::EINVAL));
    }

    #[test]
    fn statx_and_fstatat_agree_with_stat() {
        setup();
        let p = c"/dev/infiniband/uverbs0";
        let s = st(p).unwrap();
        let mut x: libc::statx = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe {
                statx(
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    0,
                    libc::STATX_BASIC_STATS,
                    &mut x,
                )
            },
            0
        );
        assert_eq!(u32::from(x.stx_mode), s.st_mode);
        assert_eq!(x.stx_ino, s.st_ino);
        assert_eq!((x.stx_rdev_major, x.stx_rdev_minor), (231, 192));
        let mut a: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { fstatat(-1, p.as_ptr(), &mut a, 0) }, 0);
        assert_eq!(
            (a.st_mode, a.st_ino, a.st_rdev),
            (s.st_mode, s.st_ino, s.st_rdev)
        );
    }

    #[test]
    fn access_follows_the_modes() {
        setup();
        let f = c"/sys/class/infiniband/softib0/ports/1/gid_attrs/types/0";
        assert_eq!(unsafe { access(f.as_ptr(), libc::R_OK) }, 0);
        assert_eq!(unsafe { access(f.as_ptr(), libc::X_OK) }, -1);
        assert_eq!(errno(), libc::EACCES);
        let d = c"/sys/class/infiniband/softib0/ports";
        assert_eq!(unsafe { access(d.as_ptr(), libc::R_OK | libc::X_OK) }, 0);
        assert_eq!(unsafe { access(d.as_ptr(), 0x40) }, -1);
        assert_eq!(errno(), libc::EINVAL);
        let expect_w = if unsafe { libc::getuid() } == 0 {
            0
        } else {
            -1
        };
        assert_eq!(unsafe { access(f.as_ptr(), libc::W_OK) }, expect_w);
    }

    #[test]
    fn other_paths_go_to_libc() {
        setup();
        assert_eq!(st(c"/").unwrap().st_mode & libc::S_IFMT, libc::S_IFDIR);
        assert_eq!(
            st(c"/sys/class/infiniband/no_such_dev").err(),
            Some(libc::ENOENT)
        );
        let fd = unsafe { open(c"/proc/self/stat".as_ptr(), libc::O_RDONLY, 0) };
        assert!(fd >= 0);
        unsafe { libc::close(fd) };
        assert_eq!(unsafe { access(c"/".as_ptr(), libc::R_OK) }, 0);
        assert_eq!(
            unsafe { stat(std::ptr::null(), std::ptr::null_mut()) },
            -1,
            "libc refuses a NULL path"
        );
    }

    #[test]
    fn roots_are_recognised_cheaply() {
        assert!(under_a_root(b"/dev/infiniband"));
        assert!(under_a_root(b"//sys/class"));
        assert!(under_a_root(b"/dev"));
        assert!(!under_a_root(b"/devices"));
        assert!(!under_a_root(b"/etc/dev/x"));
        assert!(!under_a_root(b"dev/infiniband"));
        assert!(!under_a_root(b""));
    }
}
