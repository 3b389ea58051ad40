//! Object tables addressed by generation-checked slot keys.
//!
//! Every verbs object (PD, CQ, SRQ, MR, AH) lives in a [`Table`] owned by the
//! [`Hca`](crate::Hca); users hold small `Copy` handles wrapping a [`Key`]. A slot freed and
//! reused gets a new generation, so a stale handle never reaches the new object.

/// Slot index plus generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl Key {
    /// A key no table ever hands out (slot indices stay far below `u32::MAX`): what an object
    /// holds in place of a handle it has no object for, such as the CQs of an XRC target QP.
    pub(crate) const NONE: Key = Key {
        index: u32::MAX,
        generation: u32::MAX,
    };
}

#[derive(Debug, Clone)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// A slab of `T` with generation-checked keys. Iteration is in slot order, so it is
/// deterministic.
#[derive(Debug, Clone)]
pub(crate) struct Table<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Table<T> {
    /// Number of live objects.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The key the next `insert` will return (lets callers derive names such as memory keys
    /// from the slot before building the object).
    pub(crate) fn next_key(&self) -> Key {
        match self.free.last() {
            Some(&index) => Key {
                index,
                generation: self.slots[index as usize].generation,
            },
            None => Key {
                index: self.slots.len() as u32,
                generation: 0,
            },
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> Key {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.value = Some(value);
            Key {
                index,
                generation: slot.generation,
            }
        } else {
            let index = self.slots.len() as u32;
            self.slots.push(Slot {
                generation: 0,
                value: Some(value),
            });
            Key {
                index,
                generation: 0,
            }
        }
    }

    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        let slot = self.slots.get(key.index as usize)?;
        if slot.generation == key.generation {
            slot.value.as_ref()
        } else {
            None
        }
    }

    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation == key.generation {
            slot.value.as_mut()
        } else {
            None
        }
    }

    /// The live object in slot `index`, whatever its generation, with its key.
    pub(crate) fn get_by_index(&self, index: u32) -> Option<(Key, &T)> {
        let slot = self.slots.get(index as usize)?;
        slot.value.as_ref().map(|v| {
            (
                Key {
                    index,
                    generation: slot.generation,
                },
                v,
            )
        })
    }

    /// [`Table::get_by_index`], mutable, without the key.
    pub(crate) fn get_by_index_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots.get_mut(index as usize)?.value.as_mut()
    }

    /// Gives the live object of `key` a new generation in the same slot and returns its new
    /// key: handles holding the old key miss from now on, as after a removal, while the
    /// object stays where it is (and keeps what it derived from the slot's index).
    pub(crate) fn renew(&mut self, key: Key) -> Option<Key> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation != key.generation || slot.value.is_none() {
            return None;
        }
        slot.generation = slot.generation.wrapping_add(1);
        Some(Key {
            index: key.index,
            generation: slot.generation,
        })
    }

    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation != key.generation {
            return None;
        }
        let v = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(key.index);
        self.len -= 1;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut t = Table::default();
        let a = t.insert("a");
        assert_eq!(t.next_key().index, 1);
        let b = t.insert("b");
        assert_eq!(t.len(), 2);
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.remove(a), None);
        assert_eq!(t.get(a), None);
        let next = t.next_key();
        let c = t.insert("c");
        assert_eq!(next, c);
        assert_eq!(c.index, a.index);
        assert_ne!(c.generation, a.generation);
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.get_by_index(c.index), Some((c, &"c")));
        *t.get_mut(b).unwrap() = "B";
        assert_eq!(t.get(b), Some(&"B"));
        assert_eq!(t.len(), 2);
        assert_eq!(t.get_by_index(9), None);
    }

    #[test]
    fn renewed_keys_replace_the_old_one() {
        let mut t = Table::default();
        let a = t.insert("a");
        let b = t.insert("b");
        let a2 = t.renew(a).unwrap();
        assert_eq!(a2.index, a.index);
        assert_ne!(a2.generation, a.generation);
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(a2), Some(&"a"));
        assert_eq!(t.get_by_index(a.index), Some((a2, &"a")));
        // The old key neither renews nor removes it; a free slot does not renew.
        assert_eq!(t.renew(a), None);
        assert_eq!(t.remove(a), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.remove(b), Some("b"));
        assert_eq!(t.renew(b), None);
        // Removal after a renewal frees the slot under the new key, and the next insert into it
        // gets yet another generation.
        assert_eq!(t.remove(a2), Some("a"));
        let c = t.insert("c");
        assert!(c != a && c != a2);
        assert_eq!(t.get(a2), None);
    }
}
