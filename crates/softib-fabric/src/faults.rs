//! Impairments: random faults per link direction and scripted rules.
//!
//! # Order of evaluation
//!
//! A frame entering a link direction at time `t` goes through, in this order (the random draws,
//! all from that direction's own generator, happen in this order too; see [`crate::rng`]):
//!
//! 1. the MTU check;
//! 2. the down schedule at `t` (a down direction drops the frame without transmitting it);
//! 3. the scripted [`Rule`]s whose [`Match::hop`] is this direction, in the order they were added
//!    (a `Drop` ends the evaluation);
//! 4. [`Faults::loss`];
//! 5. [`Faults::burst`]: the burst state's transition, then the loss draw in the bad state;
//! 6. [`Faults::corrupt`] (then the flip's position);
//! 7. [`Faults::dup`];
//! 8. [`Faults::reorder`];
//! 9. the jitter of the frame (and then of its duplicate, if any);
//! 10. the down schedule while the frame is on the wire: a direction going down before the
//!     frame has arrived loses it (it has used the transmitter all the same).
//!
//! A duplicate is an extra copy serialised right behind the original; it is not subject to
//! steps 1–8 again.

use softib_wire::native::{NativeBody, NativePacket};
use softib_wire::roce::{self, FrameClass, RocePacket};

use crate::fabric::NodeId;
use crate::link::{eth_header_len, Direction};
use crate::rng::Rng;

/// Random impairments of one link direction. The default is a perfect link.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Faults {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Bursty loss on top of `loss` (none by default).
    pub burst: Option<BurstLoss>,
    /// Probability that a frame is delivered twice.
    pub dup: f64,
    /// Probability that a frame is held back by `reorder_delay_ns`, so that frames sent after it
    /// may overtake it.
    pub reorder: f64,
    /// How long a reordered frame is held back.
    pub reorder_delay_ns: u64,
    /// Probability that one bit after the Ethernet header is flipped. For a RoCEv2 frame the bit
    /// is chosen so that the frame no longer parses or its ICRC no longer matches (bits of the
    /// fields the ICRC masks, such as the IP TTL, are never the only change).
    pub corrupt: f64,
    /// Extra delay added to every frame (keeps FIFO order).
    pub delay_ns: u64,
    /// Extra random delay, uniform in `0..=jitter_ns`, added to the link's own jitter (keeps
    /// FIFO order).
    pub jitter_ns: u64,
    /// Half-open intervals `[from_ns, to_ns)` during which the direction drops everything.
    pub down: Vec<(u64, u64)>,
}

/// Gilbert–Elliott bursty loss: a two-state chain advanced once per frame. In the good state
/// nothing is lost; in the bad state each frame is lost with probability `loss`. Bursts last
/// `1 / leave` frames on average and the chain spends `enter / (enter + leave)` of the frames in
/// the bad state.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BurstLoss {
    /// Probability of going from the good to the bad state, per frame.
    pub enter: f64,
    /// Probability of going from the bad to the good state, per frame.
    pub leave: f64,
    /// Probability that a frame is lost in the bad state.
    pub loss: f64,
}

impl Faults {
    /// A perfect link.
    pub fn none() -> Self {
        Faults::default()
    }

    /// True when the direction is down at `t`.
    pub fn is_down(&self, t: u64) -> bool {
        self.down.iter().any(|&(from, to)| from <= t && t < to)
    }

    /// True when a down interval begins in `(t, arrival]` or covers any part of it.
    pub(crate) fn down_during(&self, t: u64, arrival: u64) -> bool {
        self.down
            .iter()
            .any(|&(from, to)| from <= arrival && t < to && from < to)
    }
}

/// What a [`Rule`] does to the frames it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Drop the frame.
    Drop,
    /// Deliver an extra copy right behind it.
    Duplicate,
    /// Hold the frame back by this many ns, letting later frames overtake it.
    Delay(u64),
    /// Flip one bit after the Ethernet header (as [`Faults::corrupt`] does).
    Corrupt,
}

/// Which frames a [`Rule`] looks at. Every `Some` field must match; non-RoCEv2 frames (and
/// frames that do not parse with [`RocePacket::parse`]) never match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Match {
    /// BTH:OpCode.
    pub opcode: Option<u8>,
    /// BTH:PSN (24 bits).
    pub psn: Option<u32>,
    /// BTH:DestQP (24 bits).
    pub dest_qp: Option<u32>,
    /// Only the n-th matching frame (1-based) is acted on; `None` acts on every match.
    pub nth: Option<u32>,
    /// The node that sent the frame.
    pub from: Option<NodeId>,
    /// The node the frame is addressed to (by destination MAC; broadcast and unknown
    /// destinations have none, so they never match a `to` filter).
    pub to: Option<NodeId>,
    /// Where the rule looks: on the sender's up direction (the default: every frame is seen
    /// once, as it leaves its sender) or on the receiver's down direction.
    pub hop: Direction,
}

/// A scripted impairment: `action` applies to the frames `matcher` selects.
///
/// "Drop the 3rd packet with PSN 7":
/// `Rule { matcher: Match { psn: Some(7), nth: Some(3), ..Default::default() }, action: Action::Drop }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub matcher: Match,
    pub action: Action,
}

impl Rule {
    pub fn new(matcher: Match, action: Action) -> Self {
        Rule { matcher, action }
    }
}

/// Identifies a rule added with [`crate::Fabric::add_rule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub(crate) u32);

/// How often a rule matched and acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RuleStats {
    /// Frames that matched every filter.
    pub matched: u64,
    /// Frames the action was applied to (differs from `matched` with `nth`).
    pub applied: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct RuleState {
    pub rule: Rule,
    pub stats: RuleStats,
}

/// The BTH fields rules look at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BthKey {
    pub opcode: u8,
    pub psn: u32,
    pub dest_qp: u32,
}

impl BthKey {
    pub fn of(frame: &[u8]) -> Option<BthKey> {
        let p = RocePacket::parse(frame).ok()?;
        Some(BthKey::of_bth(&p.transport.headers.bth))
    }

    /// The key of a native IB packet (LRH [GRH] BTH ...); raw datagrams have no BTH.
    pub fn of_native(frame: &[u8]) -> Option<BthKey> {
        let p = NativePacket::parse(frame).ok()?;
        match &p.body {
            NativeBody::Iba { transport, .. } => Some(BthKey::of_bth(&transport.headers.bth)),
            _ => None,
        }
    }

    fn of_bth(bth: &softib_wire::bth::Bth) -> BthKey {
        BthKey {
            opcode: bth.opcode.0,
            psn: bth.psn.value(),
            dest_qp: bth.dest_qp.value(),
        }
    }
}

/// The combined effect of the rules on one frame.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Effects {
    pub drop: bool,
    pub dup: bool,
    pub corrupt: bool,
    pub delay_ns: u64,
}

impl RuleState {
    /// Counts a match of `key` seen on `hop` from `from` to `to` and applies the action to `fx`.
    pub fn apply(
        &mut self,
        key: &BthKey,
        hop: Direction,
        from: NodeId,
        to: Option<NodeId>,
        fx: &mut Effects,
    ) {
        let m = &self.rule.matcher;
        let hit = m.hop == hop
            && m.opcode.is_none_or(|v| v == key.opcode)
            && m.psn.is_none_or(|v| v & 0x00FF_FFFF == key.psn)
            && m.dest_qp.is_none_or(|v| v & 0x00FF_FFFF == key.dest_qp)
            && m.from.is_none_or(|v| v == from)
            && m.to.is_none_or(|v| Some(v) == to);
        if !hit {
            return;
        }
        self.stats.matched += 1;
        if m.nth.is_some_and(|n| u64::from(n) != self.stats.matched) {
            return;
        }
        self.stats.applied += 1;
        match self.rule.action {
            Action::Drop => fx.drop = true,
            Action::Duplicate => fx.dup = true,
            Action::Corrupt => fx.corrupt = true,
            Action::Delay(ns) => fx.delay_ns = fx.delay_ns.saturating_add(ns),
        }
    }
}

/// Flips one random bit after the Ethernet header of `frame`. For a RoCEv2 frame, a flip that
/// leaves a frame that parses with a matching ICRC (a bit in an ICRC-masked field) is undone
/// and another bit drawn, up to 64 times. Returns false (and draws nothing) when the frame has
/// no bytes after its Ethernet header.
pub(crate) fn corrupt_frame(rng: &mut Rng, frame: &mut [u8], native: bool) -> bool {
    // A native IB packet has no link header the flip must spare: the VCRC covers it all.
    let hl = if native { 0 } else { eth_header_len(frame) };
    if frame.len() <= hl {
        return false;
    }
    let bits = ((frame.len() - hl) * 8) as u64;
    let is_roce = !native && roce::classify(frame) == FrameClass::RoceV2;
    for _ in 0..64 {
        let bit = rng.below(bits) as usize;
        let (byte, mask) = (hl + bit / 8, 1u8 << (bit % 8));
        frame[byte] ^= mask;
        let still_good = if native {
            NativePacket::parse_verified(frame).is_ok()
        } else {
            is_roce && matches!(RocePacket::parse(frame), Ok(p) if p.icrc_ok())
        };
        if !still_good {
            return true;
        }
        frame[byte] ^= mask;
    }
    // Unreachable for real frames (the ICRC bytes themselves are always covered); leave one
    // bit flipped so that the frame is at least altered.
    frame[hl] ^= 1;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_schedule() {
        let f = Faults {
            down: vec![(100, 200), (500, 500)],
            ..Default::default()
        };
        assert!(!f.is_down(99));
        assert!(f.is_down(100));
        assert!(f.is_down(199));
        assert!(!f.is_down(200));
        assert!(!f.is_down(500)); // empty interval
        assert!(f.down_during(50, 100));
        assert!(!f.down_during(50, 99));
        assert!(f.down_during(150, 160));
        assert!(!f.down_during(200, 400));
        assert!(!f.down_during(400, 600));
    }

    #[test]
    fn nth_match_applies_once() {
        let mut r = RuleState {
            rule: Rule::new(
                Match {
                    psn: Some(5),
                    nth: Some(2),
                    ..Default::default()
                },
                Action::Drop,
            ),
            stats: RuleStats::default(),
        };
        let key = |psn| BthKey {
            opcode: 0x64,
            psn,
            dest_qp: 1,
        };
        let mut drops = Vec::new();
        for psn in [5, 4, 5, 5, 6] {
            let mut fx = Effects::default();
            r.apply(&key(psn), Direction::Up, NodeId(0), None, &mut fx);
            drops.push(fx.drop);
        }
        assert_eq!(drops, [false, false, true, false, false]);
        assert_eq!(
            r.stats,
            RuleStats {
                matched: 3,
                applied: 1
            }
        );
        let mut fx = Effects::default();
        r.apply(&key(5), Direction::Down, NodeId(0), None, &mut fx);
        assert_eq!(r.stats.matched, 3, "wrong hop must not match");
    }

    #[test]
    fn corrupting_a_short_frame() {
        let mut rng = Rng::new(1);
        let mut f = [0u8; 14];
        assert!(!corrupt_frame(&mut rng, &mut f, false));
        assert_eq!(f, [0u8; 14]);
        let mut g = [0u8; 15];
        assert!(corrupt_frame(&mut rng, &mut g, false));
        assert_eq!(g[..14], [0u8; 14]);
        assert_eq!(g[14].count_ones(), 1);
    }
}
