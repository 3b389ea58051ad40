//! What the tests of softib's librdmacm.so.1 share.

use std::path::PathBuf;

/// The cdylib of this build: `<target>/<profile>/deps/librdmacm.so` beside the test binary
/// (`cargo test` does not copy it up), else `<target>/<profile>/librdmacm.so`.
pub fn library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.join("librdmacm.so"),
        deps.parent()?.join("librdmacm.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}
