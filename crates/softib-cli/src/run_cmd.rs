//! `softib run [--bind IP] [--pcap PATH] -- PROGRAM ARGS...`: runs an unmodified RDMA program
//! on softib's `libibverbs.so.1` (crates/softib-verbs) and `librdmacm.so.1`
//! (crates/softib-rdmacm).
//!
//! The libraries are `libibverbs.so` and `librdmacm.so` next to the `softib` executable
//! (`cargo build --release` leaves them all in `target/release`), or in `$SOFTIB_LIB_DIR`. The
//! loader looks for the sonames, so a directory holding `libibverbs.so.1` and
//! `librdmacm.so.1` symlinks to them (`ld/` beside the executable, or a per-process directory
//! under the temp dir when that is not writable) is put first on `LD_LIBRARY_PATH`; `SOFTIB_BIND` / `SOFTIB_PCAP` carry the options; then the
//! program replaces this process (exec), so its exit status and signals are its own.

use std::ffi::OsString;
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
