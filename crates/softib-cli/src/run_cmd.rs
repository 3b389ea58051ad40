//! `softib run [--bind IP] [--pcap PATH] -- PROGRAM ARGS...`: runs an unmodified RDMA program
//! on softib's `libibverbs.so.1` (crates/softib-verbs) and `librdmacm.so.1`
//! (crates/softib-rdmacm).
//!
//! The libraries are `libibverbs.so` and `librdmacm.so` next to the `softib` executable
//! (`cargo build --release` leaves them all in `target/release`), or in `$SOFTIB_LIB_DIR`. The
//! loader looks for the sonames, so a directory holding `libibverbs.so.1` and
//! `librdmacm.so.1` symlinks to them (`ld/` beside the executable, or a per-process directory
//! under the temp dir when that is not writable) is put first on `LD_LIBRARY_PATH`; the
//! preload library `libsoftib_preload.so` of the same directory (crates/softib-preload) is put
//! first on `LD_PRELOAD`, so that middleware which looks for RDMA devices in
//! `/dev/infiniband` and `/sys/class/infiniband` (UCX, Open MPI) finds softib's; `SOFTIB_BIND`
//! / `SOFTIB_PCAP` carry the options; then the program replaces this process (exec), so its
//! exit status and signals are its own. The environment reaches every process the program
//! starts (`softib run -- mpirun ...`: every local rank).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Address the softib device binds (a real interface's IP to talk to other hosts or Linux
    /// rxe); several devices: IP,IP. Default: each process takes the first free 127.0.0.x.
    #[arg(long)]
    bind: Option<String>,
    /// Write every frame to PATH.<pid>.<n>.pcap.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, last = true)]
    program: Vec<OsString>,
}

/// The directory of softib's `libibverbs.so`.
pub fn library_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("SOFTIB_LIB_DIR") {
        let d = PathBuf::from(d);
        if d.join("libibverbs.so").is_file() || d.join("libibverbs.so.1").exists() {
            return Ok(d);
        }
        return Err(format!(
            "SOFTIB_LIB_DIR={} holds no libibverbs.so",
            d.display()
        ));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find softib itself: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("the softib executable has no directory")?
        .to_path_buf();
    if dir.join("libibverbs.so").is_file() {
        return Ok(dir);
    }
    Err(format!(
        "softib's libibverbs.so is not in {} (build it with `cargo build --release`, or set \
         SOFTIB_LIB_DIR)",
        dir.display()
    ))
}

/// The libraries (file name, soname) a program is given: libibverbs always, librdmacm when
/// it was built.
const LIBS: [(&str, &str); 2] = [
    ("libibverbs.so", "libibverbs.so.1"),
    ("librdmacm.so", "librdmacm.so.1"),
];

/// A directory whose `libibverbs.so.1` (and `librdmacm.so.1`, if built) are (symlinks to)
/// softib's libraries.
pub fn loader_dir(lib_dir: &Path) -> Result<PathBuf, String> {
    let wanted: Vec<(PathBuf, &str)> = LIBS
        .iter()
        .filter(|(file, soname)| {
            *file == "libibverbs.so"
                || lib_dir.join(file).is_file()
                || lib_dir.join(soname).exists()
        })
        .map(|(file, soname)| (lib_dir.join(file), *soname))
        .collect();
    if wanted
        .iter()
        .all(|(_, soname)| lib_dir.join(soname).exists())
    {
        return Ok(lib_dir.to_path_buf());
    }
    let candidates = [
        lib_dir.join("ld"),
        std::env::temp_dir().join(format!("softib-ld-{}", std::process::id())),
    ];
    let mut last = String::new();
    for d in candidates {
        match wanted
            .iter()
            .try_for_each(|(target, soname)| link_into(&d, target, soname))
        {
            Ok(()) => return Ok(d),
            Err(e) => last = format!("{}: {e}", d.display()),
        }
    }
    Err(format!("cannot make the library links ({last})"))
}

/// The preload library's file name.
pub const PRELOAD: &str = "libsoftib_preload.so";

/// `LD_PRELOAD` with `lib` first and `old`'s entries after it (`lib` itself not repeated, as
/// in a `softib run` inside another). The loader splits the list at spaces and colons, so a
/// path holding either cannot be preloaded: `Err` then.
pub fn preload_list(lib: &Path, old: Option<&std::ffi::OsStr>) -> Result<OsString, String> {
    let lib_s = lib.as_os_str();
    if lib_s.as_bytes().iter().any(|&b| b == b' ' || b == b':') {
        return Err(format!(
            "{} has a space or a colon, which LD_PRELOAD cannot hold",
            lib.display()
        ));
    }
    let mut out = OsString::from(lib_s);
    if let Some(old) = old {
        for entry in old
            .as_bytes()
            .split(|&b| b == b' ' || b == b':')
            .filter(|e| !e.is_empty() && *e != lib_s.as_bytes())
        {
            out.push(":");
            out.push(std::ffi::OsStr::from_bytes(entry));
        }
    }
    Ok(out)
}

fn link_into(dir: &Path, target: &Path, soname: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let link = dir.join(soname);
    if std::fs::read_link(&link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    // Atomically: another `softib run` may be doing the same.
    let tmp = dir.join(format!(".{soname}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, &link)
}

/// `LD_PRELOAD` for the program: softib's preload library (beside libibverbs.so, or in the
/// loader directory `dir` made for it) first.
fn preload(dir: &Path) -> Result<OsString, String> {
    let candidates = library_dir()
        .into_iter()
        .chain([dir.to_path_buf()])
        .map(|d| d.join(PRELOAD));
    let lib = candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{PRELOAD} is not beside libibverbs.so (cargo build --release)"))?;
    let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
    preload_list(&lib, std::env::var_os("LD_PRELOAD").as_deref())
}

pub fn run(args: RunArgs) -> ExitCode {
    let dir = match library_dir().and_then(|d| loader_dir(&d)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softib run: {e}");
            return ExitCode::from(127);
        }
    };
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (prog, rest) = args.program.split_first().expect("clap requires a program");
    let mut cmd = Command::new(prog);
    cmd.args(rest).env("LD_LIBRARY_PATH", path);
    match preload(&dir) {
        Ok(list) => {
            cmd.env("LD_PRELOAD", list);
        }
        Err(e) => eprintln!(
            "softib run: warning: {e}; middleware that looks for devices in /dev/infiniband \
             (UCX, Open MPI) will not see softib's"
        ),
    }
    if let Some(b) = &args.bind {
        cmd.env("SOFTIB_BIND", b);
    }
    if let Some(p) = &args.pcap {
        cmd.env("SOFTIB_PCAP", p);
    }
    let err = cmd.exec();
    eprintln!("softib run: cannot run {}: {err}", prog.to_string_lossy());
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn preload_goes_first_and_keeps_the_rest() {
        let lib = Path::new("/opt/softib/libsoftib_preload.so");
        assert_eq!(
            preload_list(lib, None).unwrap(),
            OsStr::new("/opt/softib/libsoftib_preload.so")
        );
        assert_eq!(
            preload_list(lib, Some(OsStr::new("/a/libx.so /b/liby.so:"))).unwrap(),
            OsStr::new("/opt/softib/libsoftib_preload.so:/a/libx.so:/b/liby.so")
        );
        // A `softib run` inside another does not preload it twice.
        assert_eq!(
            preload_list(
                lib,
                Some(OsStr::new("/opt/softib/libsoftib_preload.so:/a/libx.so"))
            )
            .unwrap(),
            OsStr::new("/opt/softib/libsoftib_preload.so:/a/libx.so")
        );
        assert!(preload_list(Path::new("/my dir/libsoftib_preload.so"), None).is_err());
        assert!(preload_list(Path::new("/a:b/libsoftib_preload.so"), None).is_err());
    }
}
