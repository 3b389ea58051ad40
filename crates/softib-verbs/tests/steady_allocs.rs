//! Heap allocations per message through the C ABI: none on the steady path.
//! `tests/c/steady_allocs.c`, compiled against the installed `<infiniband/verbs.h>` and run on
//! the built `libibverbs.so`, counts every allocation of the process (it defines `malloc` and
//! its kin over glibc's) while two RC QPs move 64-byte WRITEs and SENDs, posted with
//! `ibv_post_send` or with the `ibv_wr_*` interface, from one SGE or inline.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| common::verbs_program("steady_allocs", &["-rdynamic"]))
}

fn run_case(case: &str) {
    common::run_c_case(program(), case, &[], Duration::from_secs(60));
}

#[test]
fn post_send_write_allocates_nothing() {
    run_case("post_write_sge");
    run_case("post_write_inline");
}

#[test]
fn post_send_send_allocates_nothing() {
    run_case("post_send_sge");
    run_case("post_send_inline");
}

#[test]
fn wr_interface_write_allocates_nothing() {
    run_case("wr_write_sge");
    run_case("wr_write_inline");
}

#[test]
fn wr_interface_send_allocates_nothing() {
    run_case("wr_send_sge");
    run_case("wr_send_inline");
}
