//! The trampolines forward: `tests/c/trampolines.c`, built against rdma-core's
//! `<rdma/rdma_cma.h>` and linked with this build's librdmacm.so.1, runs with a stand-in
//! libibverbs.so.1 (`tests/c/fake_ibverbs.c`): arguments (six registers) and results travel,
//! and a function the stand-in lacks fails as documented with ENOSYS.

use std::path::Path;
use std::process::Command;

mod common;
use common::library;

fn cc(args: &[&str]) -> Result<(), String> {
    let out = Command::new("cc")
        .args(args)
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn forwards_and_fails_with_enosys() {
    let lib = library().expect("librdmacm.so was not built beside this test");
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists()
        || Command::new("cc").arg("--version").output().is_err()
    {
        println!("SKIPPED: cc or <rdma/rdma_cma.h> (Debian: librdmacm-dev) is missing");
        assert!(
            std::env::var("CI").is_err(),
            "librdmacm-dev must be installed in CI"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("softib-rdmacm-tramp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let d = dir.to_str().unwrap();
    cc(&[
        "-shared",
        "-fPIC",
        "-Wl,-soname,libibverbs.so.1",
        "-o",
        &format!("{d}/libibverbs.so.1"),
        src.join("fake_ibverbs.c").to_str().unwrap(),
    ])
    .unwrap();
    std::os::unix::fs::symlink(lib.canonicalize().unwrap(), dir.join("librdmacm.so.1")).unwrap();
    std::os::unix::fs::symlink(dir.join("librdmacm.so.1"), dir.join("librdmacm.so")).unwrap();
    cc(&[
        "-O1",
        "-o",
        &format!("{d}/trampolines"),
        src.join("trampolines.c").to_str().unwrap(),
        &format!("-L{d}"),
        "-lrdmacm",
        &format!("-Wl,-rpath,{d}"),
    ])
    .unwrap();
    let out = Command::new(dir.join("trampolines"))
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}");
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok ")).count(),
        6,
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
