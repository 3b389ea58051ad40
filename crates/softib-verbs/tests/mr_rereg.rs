//! ibv_rereg_mr through the C ABI: `tests/c/mr_rereg.c`, compiled against the installed
//! `<infiniband/verbs.h>` and linked with `-libverbs` against the built `libibverbs.so`, runs
//! one case per test on softib (`LD_LIBRARY_PATH`); its stderr names each check that did not
//! hold.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

fn program() -> &'static Result<(PathBuf, PathBuf), String> {
    static P: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| common::verbs_program("mr_rereg", &[]))
}

fn run_case(case: &str) {
    common::run_c_case(program(), case, &[], Duration::from_secs(120));
}

/// Unknown flags, a translation without address or length, rights without
/// IBV_REREG_MR_CHANGE_ACCESS, no region: IBV_REREG_MR_ERR_INPUT and EINVAL. No flag, a NULL,
/// deallocated or foreign PD, remote write without local write: IBV_REREG_MR_ERR_CMD and
/// EINVAL; memory windows EOPNOTSUPP; unmapped or read-only memory for writable rights EFAULT.
/// The region is unchanged after each and still takes a WRITE; `pd` is not read without
/// IBV_REREG_MR_CHANGE_PD.
#[test]
fn rereg_mr_bad_input_leaves_the_region() {
    run_case("bad_input");
}

/// IBV_REREG_MR_CHANGE_ACCESS: keys kept; without REMOTE_WRITE a WRITE completes with
/// IBV_WC_REM_ACCESS_ERR and changes nothing while a READ works; without LOCAL_WRITE a READ
/// cannot land (IBV_WC_LOC_PROT_ERR); granted again, WRITEs land.
#[test]
fn rereg_mr_change_access() {
    run_case("access");
}

/// IBV_REREG_MR_CHANGE_PD: mr->pd follows, keys kept; a QP of the old PD is refused remotely
/// (IBV_WC_REM_ACCESS_ERR) and locally (IBV_WC_LOC_PROT_ERR), one of the new PD works; the PD
/// holding the region is busy, the one it left can be freed.
#[test]
fn rereg_mr_change_pd() {
    run_case("pd");
}

/// IBV_REREG_MR_CHANGE_TRANSLATION: mr->addr and mr->length follow, keys kept; the old buffer
/// takes nothing, the new one takes WRITEs up to its own length; translation and access
/// changed at once.
#[test]
fn rereg_mr_change_translation() {
    run_case("translation");
}
