//! The event queue: a binary min-heap of events ordered by `(time, seq)`.
//!
//! Sequence numbers are unique, so the order in which events come out is fully determined by
//! their keys, whatever the heap's internal layout.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// The first frame queued on a link direction (index) reaches its far end.
    Link,
    /// A held-back frame (slab index) reaches the far end of its link direction.
    Held,
    /// A node's (index) timeout.
    Timer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub time: u64,
    pub seq: u64,
    pub idx: u32,
    pub kind: EventKind,
}

impl Event {
    #[inline]
    fn key(&self) -> u128 {
        (u128::from(self.time) << 64) | u128::from(self.seq)
    }
}

/// A min-heap of [`Event`]s by `(time, seq)`.
#[derive(Debug, Default)]
pub(crate) struct EventHeap {
    v: Vec<Event>,
}

impl EventHeap {
    /// The earliest event.
    #[inline]
    pub fn peek(&self) -> Option<&Event> {
        self.v.first()
    }

    #[inline]
    pub fn push(&mut self, e: Event) {
        let mut i = self.v.len();
        self.v.push(e);
        let k = e.key();
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.v[parent].key() <= k {
                break;
            }
            self.v[i] = self.v[parent];
            i = parent;
        }
        self.v[i] = e;
    }

    /// Removes the earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let top = *self.v.first()?;
        let last = self.v.pop().expect("not empty");
        if !self.v.is_empty() {
            self.sift_down(last);
        }
        Some(top)
    }

    /// Replaces the earliest event with `e` (cheaper than a pop and a push).
    ///
    /// # Panics
    /// If the heap is empty.
    #[inline(always)]
    pub fn replace_top(&mut self, e: Event) {
        assert!(!self.v.is_empty(), "replace_top on an empty heap");
        self.sift_down(e);
    }

    /// Puts `e` at the root and moves it down to its place.
    #[inline(always)]
    fn sift_down(&mut self, e: Event) {
        let n = self.v.len();
        let k = e.key();
        let mut i = 0;
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && self.v[r].key() < self.v[l].key() {
                r
            } else {
                l
            };
            if self.v[c].key() >= k {
                break;
            }
            self.v[i] = self.v[c];
            i = c;
        }
        self.v[i] = e;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn events_come_out_in_time_then_sequence_order() {
        let mut h = EventHeap::default();
        let mut r = Rng::new(9);
        let mut all = Vec::new();
        let mut seq = 0;
        let ev = |time, seq| Event {
            time,
            seq,
            idx: 0,
            kind: EventKind::Link,
        };
        for round in 0..50 {
            for _ in 0..r.below(40) {
                let e = ev(r.below(30), seq);
                seq += 1;
                h.push(e);
                all.push(e);
            }
            all.sort_by_key(|e| (e.time, e.seq));
            for _ in 0..r.below(30) {
                if round % 2 == 0 && !all.is_empty() {
                    // Replace the top with a later event.
                    let top = all.remove(0);
                    assert_eq!(h.peek(), Some(&top));
                    let e = ev(top.time + r.below(20), seq);
                    seq += 1;
                    h.replace_top(e);
                    all.push(e);
                    all.sort_by_key(|e| (e.time, e.seq));
                } else {
                    assert_eq!(h.pop(), (!all.is_empty()).then(|| all.remove(0)));
                }
            }
        }
        while let Some(e) = h.pop() {
            assert_eq!(e, all.remove(0));
        }
        assert!(all.is_empty());
    }
}
