//! The frames on one link direction that keep FIFO order, with their bytes.
//!
//! Arrivals on a link direction come in the order frames entered it (see [`crate::link`]), so
//! a queue stores each frame as a 24-byte header (arrival time, sequence number, sender, length)
//! followed by its bytes, back to back in fixed-size chunks, and reads them back from the front.
//! A chunk whose frames have all been taken goes back to a pool shared by every queue of the
//! fabric. So a run allocates once per [`CHUNK`] bytes in flight at its busiest, never per
//! frame, and memory is written and read in order, which suits the caches and the prefetcher
//! when many frames are in flight.
//!
//! A frame that already has a buffer of its own (a large one: copying it would cost more than
//! handing the buffer on) is queued as a header that says so, its buffer in a side queue in the
//! same order.

use std::collections::VecDeque;

/// Size of a chunk. A frame larger than this gets a chunk of its own size.
pub(crate) const CHUNK: usize = 64 * 1024;

/// A chunk of a larger capacity (one made for a single large frame) is freed rather than
/// pooled.
const MAX_POOLED_CHUNK: usize = 4 * CHUNK;

/// A queued frame: due at the far end at `time`; its bytes follow its header in the queue, or
/// are in a buffer of its own (`boxed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pending {
    pub time: u64,
    pub seq: u64,
    /// The node that transmitted the frame.
    pub src: u32,
    /// Length of the bytes after the header (0 for a boxed frame).
    len: usize,
    boxed: bool,
}

/// Length of a frame's header in a chunk: time, seq, src and length, little-endian.
const HEADER: usize = 24;

/// The length field of a boxed frame's header.
const BOXED: u32 = u32::MAX;

impl Pending {
    #[inline(always)]
    fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[..8].copy_from_slice(&self.time.to_le_bytes());
        h[8..16].copy_from_slice(&self.seq.to_le_bytes());
        h[16..20].copy_from_slice(&self.src.to_le_bytes());
        let len = if self.boxed { BOXED } else { self.len as u32 };
        h[20..].copy_from_slice(&len.to_le_bytes());
        h
    }

    /// The header at the start of `b` (which the queue wrote).
    #[inline(always)]
    fn decode(b: &[u8]) -> Pending {
        let h: &[u8; HEADER] = b[..HEADER].try_into().expect("a whole header");
        let w = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        let d = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let len = d(20);
        Pending {
            time: w(0),
            seq: w(8),
            src: d(16),
            len: if len == BOXED { 0 } else { len as usize },
            boxed: len == BOXED,
        }
    }
}

/// Where the bytes of a frame taken from a queue are.
#[derive(Debug)]
pub(crate) enum Taken {
    /// At this offset of the chunk [`FrameQueue::take_chunk`] lends out, `len` long.
    Inline { off: usize, len: usize },
    /// In a buffer of its own.
    Boxed(Vec<u8>),
}

/// Empty chunks, shared by every queue of a fabric.
#[derive(Debug, Default)]
pub(crate) struct ChunkPool {
    free: Vec<Vec<u8>>,
    /// Chunks allocated so far (the pool was empty, or the frame was larger than a chunk).
    pub created: u64,
}

impl ChunkPool {
    /// An empty chunk with room for at least `need` bytes.
    #[inline(never)]
    fn take(&mut self, need: usize) -> Vec<u8> {
        if need <= CHUNK {
            if let Some(c) = self.free.pop() {
                return c;
            }
        }
        self.created += 1;
        Vec::with_capacity(need.max(CHUNK))
    }

    fn put(&mut self, mut c: Vec<u8>) {
        if c.capacity() >= CHUNK && c.capacity() <= MAX_POOLED_CHUNK {
            c.clear();
            self.free.push(c);
        }
    }
}

/// A FIFO queue of frames: each frame's header followed by its bytes, back to back in chunks.
#[derive(Debug, Default)]
pub(crate) struct FrameQueue {
    /// Frames queued.
    n: usize,
    /// The chunk the first frame is read from; its bytes before `read` belong to frames
    /// already taken. Frames are written to it too while `more` is empty.
    head: Vec<u8>,
    read: usize,
    /// Later chunks, in order; frames are written to the last one. A frame (with its header)
    /// never straddles two chunks.
    more: VecDeque<Vec<u8>>,
    /// The time of the last frame pushed.
    last: u64,
    /// The buffers of boxed frames, in order.
    boxed: VecDeque<Vec<u8>>,
}

impl FrameQueue {
    /// The longest frame a queue copies (a longer one must be boxed).
    pub const MAX_FRAME: usize = BOXED as usize - 1;

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The first frame, if any.
    #[inline(always)]
    pub fn front(&self) -> Option<Pending> {
        if self.n == 0 {
            return None;
        }
        // After a pop the next frame may start the next chunk.
        Some(match self.head.get(self.read..) {
            Some(b) if !b.is_empty() => Pending::decode(b),
            _ => Pending::decode(&self.more[0]),
        })
    }

    /// The arrival time of the last frame pushed (0 before the first).
    #[inline(always)]
    pub fn last_time(&self) -> u64 {
        self.last
    }

    /// Appends a frame due at `time`, copying `bytes` (at most [`FrameQueue::MAX_FRAME`]).
    #[inline(always)]
    pub fn push(&mut self, pool: &mut ChunkPool, time: u64, seq: u64, src: u32, bytes: &[u8]) {
        debug_assert!(bytes.len() <= Self::MAX_FRAME);
        let h = Pending {
            time,
            seq,
            src,
            len: bytes.len(),
            boxed: false,
        };
        let tail = self.tail(pool, HEADER + bytes.len());
        tail.extend_from_slice(&h.encode());
        tail.extend_from_slice(bytes);
        self.last = time;
        self.n += 1;
    }

    /// Appends a frame due at `time` whose bytes are `buf`, which the queue keeps.
    #[inline(always)]
    pub fn push_boxed(
        &mut self,
        pool: &mut ChunkPool,
        time: u64,
        seq: u64,
        src: u32,
        buf: Vec<u8>,
    ) {
        let h = Pending {
            time,
            seq,
            src,
            len: 0,
            boxed: true,
        };
        self.tail(pool, HEADER).extend_from_slice(&h.encode());
        self.boxed.push_back(buf);
        self.last = time;
        self.n += 1;
    }

    /// The chunk to write to, with room for `need` more bytes.
    #[inline(always)]
    fn tail(&mut self, pool: &mut ChunkPool, need: usize) -> &mut Vec<u8> {
        if self.read != 0 && self.n == 0 {
            self.reset(pool);
        }
        let tail = self.more.back().unwrap_or(&self.head);
        if tail.capacity() - tail.len() < need {
            self.more.push_back(pool.take(need));
        }
        self.more.back_mut().unwrap_or(&mut self.head)
    }

    /// Removes the first frame. Unless boxed, its bytes are in the chunk that
    /// [`FrameQueue::take_chunk`] lends out, until the next call on this queue.
    #[inline(always)]
    pub fn pop(&mut self, pool: &mut ChunkPool) -> Option<(Pending, Taken)> {
        if self.n == 0 {
            return None;
        }
        if self.read == self.head.len() {
            // The head chunk is used up: the frame starts the next one.
            if let Some(next) = self.more.pop_front() {
                pool.put(std::mem::replace(&mut self.head, next));
            }
            self.read = 0;
        }
        let p = Pending::decode(&self.head[self.read..]);
        let off = self.read + HEADER;
        self.read = off + p.len;
        self.n -= 1;
        let taken = if p.boxed {
            Taken::Boxed(self.boxed.pop_front().expect("a boxed frame's buffer"))
        } else {
            Taken::Inline { off, len: p.len }
        };
        Some((p, taken))
    }

    /// Lends out the chunk that holds the bytes of the frame [`FrameQueue::pop`] just returned;
    /// nothing may be pushed to this queue until [`FrameQueue::return_chunk`].
    #[inline(always)]
    pub fn take_chunk(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.head)
    }

    /// Takes back the chunk lent out by [`FrameQueue::take_chunk`].
    #[inline(always)]
    pub fn return_chunk(&mut self, chunk: Vec<u8>) {
        debug_assert_eq!(self.head.capacity(), 0, "chunk slot reused while lent");
        self.head = chunk;
    }

    /// Starts the storage of an empty queue afresh, keeping one chunk.
    #[inline(never)]
    fn reset(&mut self, pool: &mut ChunkPool) {
        self.read = 0;
        self.head.clear();
        if self.head.capacity() > MAX_POOLED_CHUNK {
            self.head = Vec::new();
        }
        while let Some(c) = self.more.pop_front() {
            if self.head.capacity() == 0 {
                self.head = c;
                self.head.clear();
            } else {
                pool.put(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pops one frame, checking that it reads back the bytes it was pushed with.
    fn pop_one(q: &mut FrameQueue, pool: &mut ChunkPool, want: &mut VecDeque<Vec<u8>>) -> bool {
        let next = q.front();
        let Some((p, taken)) = q.pop(pool) else {
            assert!(next.is_none());
            return false;
        };
        assert_eq!(next, Some(p));
        let w = want.pop_front().unwrap();
        match taken {
            Taken::Inline { off, len } => {
                let c = q.take_chunk();
                assert_eq!(&c[off..off + len], &w[..], "frame at time {}", p.time);
                q.return_chunk(c);
            }
            Taken::Boxed(b) => assert_eq!(b, w, "boxed frame at time {}", p.time),
        }
        true
    }

    /// Pops every frame, checking each.
    fn drain(q: &mut FrameQueue, pool: &mut ChunkPool, want: &mut VecDeque<Vec<u8>>) {
        while pop_one(q, pool, want) {}
        assert!(want.is_empty());
    }

    #[test]
    fn frames_come_back_in_order_across_chunks() {
        let mut pool = ChunkPool::default();
        let mut q = FrameQueue::default();
        let mut want = VecDeque::new();
        // Sizes that leave odd remainders in chunks, empty frames, and frames larger than a
        // chunk (which get chunks of their own).
        let sizes = [
            0usize,
            60,
            1_500,
            9_000,
            0,
            CHUNK - 7,
            13,
            CHUNK + 100,
            0,
            64,
            3 * CHUNK,
        ];
        let mut t = 0;
        for round in 0..3u8 {
            for (i, &n) in sizes.iter().enumerate() {
                let f: Vec<u8> = (0..n).map(|k| (k as u8) ^ (i as u8) ^ round).collect();
                if (i + round as usize) % 3 == 0 {
                    q.push_boxed(&mut pool, t, t, i as u32, f.clone());
                } else {
                    q.push(&mut pool, t, t, i as u32, &f);
                }
                want.push_back(f);
                t += 1;
            }
            // Interleave: take a few, push more, then drain.
            for _ in 0..4 {
                assert!(pop_one(&mut q, &mut pool, &mut want));
            }
            for n in [100usize, 0, CHUNK] {
                let f = vec![round; n];
                q.push(&mut pool, t, t, 0, &f);
                want.push_back(f);
                t += 1;
            }
            drain(&mut q, &mut pool, &mut want);
            assert!(q.is_empty());
        }
        // Storage is reused: a steady flow creates no more chunks.
        let before = pool.created;
        for i in 0..10_000u64 {
            let f = vec![i as u8; 200];
            q.push(&mut pool, i, i, 0, &f);
            want.push_back(f);
            if i % 3 == 0 {
                drain(&mut q, &mut pool, &mut want);
            }
        }
        drain(&mut q, &mut pool, &mut want);
        assert!(pool.created <= before + 1, "{} -> {}", before, pool.created);
    }
}
