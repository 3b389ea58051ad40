//! Moving frames between two HCAs in tests: the part the RoCE harness (`common/`) and the
//! native IB harness (`ib/`) share.

use softib_core::time::Instant;
use softib_core::Hca;

/// Which way a frame travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    AtoB,
    BtoA,
}

/// Decides whether a frame is delivered (false: dropped).
pub type Filter = Box<dyn FnMut(Dir, &[u8]) -> bool>;

/// Moves frames between `a` and `b` until both are idle and no timer is due before
/// `limit_ns`, advancing `now` to each timer; every delivered frame is appended to `log`.
pub fn run(
    a: &mut Hca,
    b: &mut Hca,
    now: &mut Instant,
    filter: &mut Filter,
    log: &mut Vec<(Dir, Vec<u8>)>,
    limit_ns: u64,
) {
    let mut buf = Vec::new();
    loop {
        let mut moved = false;
        while a.poll_transmit(*now, &mut buf) {
            moved = true;
            if filter(Dir::AtoB, &buf) {
                log.push((Dir::AtoB, buf.clone()));
                b.handle_frame(*now, &buf);
            }
        }
        while b.poll_transmit(*now, &mut buf) {
            moved = true;
            if filter(Dir::BtoA, &buf) {
                log.push((Dir::BtoA, buf.clone()));
                a.handle_frame(*now, &buf);
            }
        }
        if moved {
            continue;
        }
        let next = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t.as_nanos() <= limit_ns => {
                *now = (*now).max(t);
                a.handle_timeout(*now);
                b.handle_timeout(*now);
            }
            _ => return,
        }
    }
}
