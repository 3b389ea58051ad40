//! The built `libsoftib_preload.so` preloaded into ordinary programs (coreutils, the shell):
//! what they see of softib's devices, for the device lists `SOFTIB_BIND` and a config file
//! give, and that every other path is the file system's.

// The library's own code may not panic; a test may.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cdylib of this build: `target/<profile>/deps` beside this test (cargo test), or
/// `target/<profile>` (cargo build).
fn library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.join("libsoftib_preload.so"),
        deps.parent()?.join("libsoftib_preload.so"),
    ]
    .into_iter()
    .filter(|p| p.is_file())
    .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// Runs `argv` with the library preloaded and `env`; stdout, or the failure.
fn run(lib: &Path, env: &[(&str, &str)], argv: &[&str]) -> Result<String, String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .env("LD_PRELOAD", lib)
        .env_remove("SOFTIB_BIND")
        .env_remove("SOFTIB_CONFIG")
        // No devices.conf of the user running the tests.
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .envs(env.iter().copied())
        .output()
        .map_err(|e| format!("{argv:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{argv:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn lib_or_skip() -> Option<PathBuf> {
    let lib = library();
    if lib.is_none() {
        println!("SKIPPED: libsoftib_preload.so was not built (cargo build -p softib-preload)");
    }
    lib
}

#[test]
fn the_default_device_is_seen_by_coreutils() {
    let Some(lib) = lib_or_skip() else { return };
    let stat = run(
        &lib,
        &[],
        &["stat", "-c", "%F %t:%T %a", "/dev/infiniband/uverbs0"],
    )
    .unwrap();
    assert_eq!(stat.trim(), "character special file e7:c0 666");
    let dir = run(
        &lib,
        &[],
        &["stat", "-c", "%F", "/sys/class/infiniband/softib0"],
    )
    .unwrap();
    assert_eq!(dir.trim(), "directory");
    let gid = run(
        &lib,
        &[],
        &[
            "cat",
            "/sys/class/infiniband/softib0/ports/1/gid_attrs/types/0",
        ],
    )
    .unwrap();
    assert_eq!(gid, "RoCE v2\n");
    let driver = run(
        &lib,
        &[],
        &["readlink", "/sys/class/infiniband/softib0/device/driver"],
    )
    .unwrap();
    assert!(driver.trim().ends_with("/rdma_rxe"), "{driver}");
    let numa = run(
        &lib,
        &[],
        &["cat", "/sys/class/infiniband/softib0/device/numa_node"],
    )
    .unwrap();
    assert_eq!(numa, "-1\n");
    // The shell's own tests (stat and access): a character device, readable and writable.
    let sh = run(
        &lib,
        &[],
        &[
            "sh",
            "-c",
            "test -c /dev/infiniband/uverbs0 && test -r /dev/infiniband/uverbs0 && \
             test -w /dev/infiniband/uverbs0 && echo yes",
        ],
    )
    .unwrap();
    assert_eq!(sh.trim(), "yes");
    // Only one device: the second is not there.
    assert!(run(&lib, &[], &["stat", "/dev/infiniband/uverbs1"]).is_err());
    assert!(run(&lib, &[], &["stat", "/sys/class/infiniband/softib1"]).is_err());
}

#[test]
fn the_devices_follow_softib_bind_and_the_config_file() {
    let Some(lib) = lib_or_skip() else { return };
    let two = [("SOFTIB_BIND", "127.0.0.7,127.0.0.8")];
    let s = run(
        &lib,
        &two,
        &["stat", "-c", "%t:%T", "/dev/infiniband/uverbs1"],
    )
    .unwrap();
    assert_eq!(s.trim(), "e7:c1");
    assert!(run(
        &lib,
        &two,
        &["stat", "/sys/class/infiniband/softib1/ports/1"]
    )
    .is_ok());
    assert!(run(&lib, &two, &["stat", "/dev/infiniband/uverbs2"]).is_err());

    let dir = std::env::temp_dir().join(format!("softib-preload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("devices.conf");
    std::fs::write(&conf, "lab0 127.0.0.9\nlab1 auto\n").unwrap();
    let env = [("SOFTIB_CONFIG", conf.to_str().unwrap())];
    let gid = run(
        &lib,
        &env,
        &[
            "cat",
            "/sys/class/infiniband/lab1/ports/1/gid_attrs/types/0",
        ],
    );
    let default_gone = run(&lib, &env, &["stat", "/sys/class/infiniband/softib0"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(gid.unwrap(), "RoCE v2\n");
    assert!(default_gone.is_err(), "softib0 is not configured");
}

#[test]
fn everything_else_is_the_file_system() {
    let Some(lib) = lib_or_skip() else { return };
    let dir = std::env::temp_dir().join(format!("softib-preload-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("file");
    std::fs::write(&f, "contents\n").unwrap();
    let link = dir.join("link");
    let _ = std::os::unix::fs::symlink("file", &link);
    let p = f.to_str().unwrap();
    let cat = run(&lib, &[], &["cat", p]);
    let rl = run(&lib, &[], &["readlink", link.to_str().unwrap()]);
    let cp = run(&lib, &[], &["cp", p, dir.join("copy").to_str().unwrap()]);
    let copied = std::fs::read_to_string(dir.join("copy"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(cat.unwrap(), "contents\n");
    assert_eq!(rl.unwrap().trim(), "file");
    cp.unwrap();
    assert_eq!(copied.unwrap(), "contents\n");
    // A write into the tree is refused as sysfs refuses it.
    let w = run(
        &lib,
        &[],
        &[
            "sh",
            "-c",
            "echo 0 > /sys/class/infiniband/softib0/device/numa_node",
        ],
    );
    assert!(w.is_err(), "{w:?}");
}
