//! A save the user asks for between steps (`s`, `S`): where the data stands, which the
//! checkpoint continues at (a rewind's skip puts it ahead of what the global step says), and,
//! where the optimizer state is split over the ranks, that the save waits for the ranks to agree
//! on it, since every rank gathers its shard for it.

/// The boundary a save between steps writes, and a save waiting for the ranks' agreement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct AskedSave {
    /// The (epoch, step) of the data that trains next.
    data_at: (usize, usize),
    /// Asked, and waiting for the next agreement of the ranks.
    waiting: bool,
}

impl AskedSave {
    /// The loop reached the boundary before the data's `position`.
    pub(super) fn at(&mut self, position: (usize, usize)) {
        self.data_at = position;
    }

    /// A save is asked for: the position to write now, or none when the state is `split` over
    /// the ranks and the save waits for their agreement.
    pub(super) fn ask(&mut self, split: bool) -> Option<(usize, usize)> {
        self.waiting |= split;
        (!split).then_some(self.data_at)
    }

    /// Whether a save waits for the ranks' agreement (rank 0's say in it).
    pub(super) fn waiting(&self) -> bool {
        self.waiting
    }

    /// The ranks agreed on a save (`agreed`): the position every rank saves at, once.
    pub(super) fn agreed(&mut self, agreed: bool) -> Option<(usize, usize)> {
        if !agreed {
            return None;
        }
        self.waiting = false;
        Some(self.data_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_save_is_written_now_or_once_the_ranks_agree_at_the_datas_own_place() {
        let mut asked = AskedSave::default();
        asked.at((2, 7));
        assert_eq!(asked.ask(false), Some((2, 7)), "one process: now");
        assert!(!asked.waiting());
        assert_eq!(asked.ask(true), None, "split over the ranks: at their agreement");
        assert!(asked.waiting());
        assert_eq!(asked.agreed(false), None, "nobody asked at this agreement");
        asked.at((2, 8));
        assert_eq!(asked.agreed(true), Some((2, 8)), "where the data stands at the agreement");
        assert!(!asked.waiting(), "saved once");
    }
}
