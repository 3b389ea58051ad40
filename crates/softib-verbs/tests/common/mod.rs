//! Helpers of the C-ABI tests: the built `libibverbs.so`, the C compiler, Debian's headers.
//! A test that cannot run its tool prints `SKIPPED: reason` and returns.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Prints the project's skip line.
pub fn skip(reason: &str) {
    println!("SKIPPED: {reason}");
    eprintln!("SKIPPED: {reason}");
}

/// `target/<profile>` of this test binary (`target/<profile>/deps/<test>-<hash>`).
fn own_profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// The cdylib this test run built: `cargo test` leaves it in `target/<profile>/deps` beside the
/// test binary (only `cargo build` copies it up to `target/<profile>/libibverbs.so`), else
/// under `CARGO_TARGET_DIR` or the workspace's `target/{release,debug}`.
pub fn built_lib() -> Option<PathBuf> {
    built("libibverbs.so")
}

/// softib's `librdmacm.so` of the same build (crates/softib-rdmacm), found as
/// [`built_lib`] finds `libibverbs.so`.
pub fn built_rdmacm() -> Option<PathBuf> {
    built("librdmacm.so")
}

fn built(file: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = own_profile_dir() {
        dirs.push(d.join("deps"));
        dirs.push(d);
    }
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    for base in std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([ws])
    {
        dirs.push(base.join("release"));
        dirs.push(base.join("debug"));
    }
    dirs.into_iter().map(|d| d.join(file)).find(|p| p.is_file())
}

/// True if `cc` runs.
pub fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The first missing header of `names` (under /usr/include), if any.
pub fn missing_header(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find(|n| !Path::new("/usr/include").join(n).is_file())
        .map(|n| format!("/usr/include/{n}"))
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softib-abi-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A directory holding `libibverbs.so` and `libibverbs.so.1` links to `lib`, for `-L` and
/// `LD_LIBRARY_PATH`.
pub fn link_dir(lib: &Path, dir: &Path) -> PathBuf {
    let d = dir.join("lib");
    std::fs::create_dir_all(&d).unwrap();
    let lib = lib.canonicalize().unwrap();
    for n in ["libibverbs.so", "libibverbs.so.1"] {
        let _ = std::fs::remove_file(d.join(n));
        std::os::unix::fs::symlink(&lib, d.join(n)).unwrap();
    }
    d
}

/// Compiles `tests/c/<name>.c` against the installed `<infiniband/verbs.h>` and links it with
/// `-libverbs` (and `extra`, flags before the libraries) against this build's libibverbs.so,
/// linked into a scratch directory: the program and that directory, or why the tests cannot
/// run.
#[allow(dead_code)] // each test crate compiles this module; not all of them use this
pub fn verbs_program(name: &str, extra: &[&str]) -> Result<(PathBuf, PathBuf), String> {
    c_program(
        name,
        &["infiniband/verbs.h"],
        "libibverbs-dev",
        false,
        extra,
    )
}

/// Compiles `tests/c/<name>.c` against the installed `headers` and links it with `-lrdmacm
/// -libverbs` (and `extra`) against this build's librdmacm.so and libibverbs.so, linked into
/// a scratch directory: the program and that directory, or why the tests cannot run.
#[allow(dead_code)] // each test crate compiles this module; not all of them use this
pub fn rdmacm_program(
    name: &str,
    headers: &[&str],
    extra: &[&str],
) -> Result<(PathBuf, PathBuf), String> {
    c_program(name, headers, "librdmacm-dev", true, extra)
}

/// [`verbs_program`], also with softib's librdmacm when `rdmacm`; `package` names what
/// provides the `headers`.
fn c_program(
    name: &str,
    headers: &[&str],
    package: &str,
    rdmacm: bool,
    extra: &[&str],
) -> Result<(PathBuf, PathBuf), String> {
    if let Some(h) = missing_header(headers) {
        return Err(format!("{h} is not installed (Debian: {package})"));
    }
    if !have_cc() {
        return Err("no C compiler (cc)".into());
    }
    let Some(lib) = built_lib() else {
        return Err("no built libibverbs.so (cargo build -p softib-verbs)".into());
    };
    let cm = if rdmacm {
        let Some(cm) = built_rdmacm() else {
            return Err("no built librdmacm.so (cargo build -p softib-rdmacm)".into());
        };
        Some(cm.canonicalize().unwrap())
    } else {
        None
    };
    let dir = scratch(name);
    let libdir = link_dir(&lib, &dir);
    if let Some(cm) = &cm {
        for n in ["librdmacm.so", "librdmacm.so.1"] {
            let _ = std::fs::remove_file(libdir.join(n));
            std::os::unix::fs::symlink(cm, libdir.join(n)).unwrap();
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = dir.join(name);
    let l = format!("-L{}", libdir.display());
    let mut args = vec![l.as_str()];
    if rdmacm {
        args.push("-lrdmacm");
    }
    args.push("-libverbs");
    args.extend_from_slice(extra);
    if let Err(e) = cc(&src, &exe, &args) {
        panic!("{e}");
    }
    Ok((exe, libdir))
}

/// Runs case `case` of a C test program built by [`verbs_program`] or [`rdmacm_program`] on
/// softib (its library directory first on `LD_LIBRARY_PATH`, no `SOFTIB_BIND`, `env` added),
/// killing it after `limit`. Skips when the program could not be built; fails when it does
/// not exit 0 (every check held).
#[allow(dead_code)] // each test crate compiles this module; not all of them use this
pub fn run_c_case(
    program: &Result<(PathBuf, PathBuf), String>,
    case: &str,
    env: &[(&str, &str)],
    limit: Duration,
) {
    let (exe, libdir) = match program {
        Ok(v) => v,
        Err(reason) => return skip(reason),
    };
    let mut cmd = Command::new(exe);
    cmd.arg(case)
        .env("LD_LIBRARY_PATH", libdir)
        .env_remove("SOFTIB_BIND")
        .envs(env.iter().copied());
    let (status, stderr) = run_limited(&mut cmd, limit);
    let Some(status) = status else {
        panic!("{case}: no exit within {} s\n{stderr}", limit.as_secs());
    };
    assert!(
        status.success(),
        "{case}: {status} (a signal means softib crashed on bad input)\n{stderr}"
    );
}

/// Compiles `src` to `out` with `args` appended; the compiler's output on failure.
pub fn cc(src: &Path, out: &Path, args: &[&str]) -> Result<(), String> {
    let o = Command::new("cc")
        .args(["-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .args(args)
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cc {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

/// Runs `cmd` with its output captured until it exits or `limit` passes (then it is killed),
/// and echoes the output. Returns the exit status (`None`: killed at the limit) and stderr.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> (Option<ExitStatus>, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{stderr}");
    (status, stderr)
}
