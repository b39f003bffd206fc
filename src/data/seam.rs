//! Where the tokens of a text encoded in overlapping pieces are joined. A tokenizer may encode
//! a piece's first and last words otherwise than the whole text does (a `Metaspace` or a prefix
//! space marks a piece's start as a word's start; a word cut short at a piece's end is another
//! word); away from a piece's edges the tokens are the whole text's. Two neighbouring pieces
//! share some bytes, and where their tokens agree for a stretch, at the same places, neither
//! piece's edge reaches: the earlier piece's tokens before that stretch and the later piece's
//! from it on are the whole text's tokens.

use super::codec::TokenAt;

/// Tokens in a row, at the same places and with the same ids, that two pieces must share for
/// their seam: a piece's edge changes a word or two, far fewer tokens than this.
const AGREE: usize = 8;

/// Two overlapping pieces whose tokens never agree for [`AGREE`] tokens in a row: the text's
/// tokens there depend on more than the overlap holds (a word longer than it, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSeam {
    /// Where the later piece begins in the text.
    pub at: usize,
}

/// The tokens of a text's pieces, given in the text's order, joined into the whole text's.
#[derive(Debug, Default)]
pub struct Joiner {
    /// The last piece's tokens not given out yet, placed in the whole text.
    tail: Vec<TokenAt>,
    /// Where the last piece ends in the text.
    end: usize,
}

impl Joiner {
    /// Takes the next piece's tokens, placed in the whole text (the piece begins at `start` and
    /// ends at `end`), and returns the ids now settled: those before the seam with the piece
    /// before. A piece that begins where the last ended needs no seam.
    pub fn push(&mut self, start: usize, end: usize, tokens: Vec<TokenAt>) -> Result<Vec<u32>, NoSeam> {
        let (settled, from) = if start >= self.end {
            (self.tail.len(), 0)
        } else {
            seam(&self.tail, &tokens, start).ok_or(NoSeam { at: start })?
        };
        let ids = self.tail[..settled].iter().map(|t| t.id).collect();
        self.tail = tokens;
        self.tail.drain(..from);
        self.end = end;
        Ok(ids)
    }

    /// The ids still held, settled by the text's end.
    pub fn finish(&mut self) -> Vec<u32> {
        self.end = 0;
        self.tail.drain(..).map(|t| t.id).collect()
    }
}

/// Where `next` (a piece beginning at `start`) joins `tail` (the piece before): the first tokens
/// of the longest row that both share in the bytes they share, as (tokens of `tail` before it,
/// tokens of `next` before it); none where no row is [`AGREE`] tokens long.
fn seam(tail: &[TokenAt], next: &[TokenAt], start: usize) -> Option<(usize, usize)> {
    let (mut i, mut j) = (tail.partition_point(|t| t.start < start), 0);
    // The longest row so far (its length and where it begins), and the current one.
    let (mut best, mut row) = ((0, 0, 0), 0);
    while i < tail.len() && j < next.len() {
        let (a, b) = (tail[i], next[j]);
        if a.start != b.start {
            // Tokens at different places: the row breaks, the one further behind moves on.
            row = 0;
            if a.start < b.start {
                i += 1;
            } else {
                j += 1;
            }
            continue;
        }
        row = if a == b { row + 1 } else { 0 };
        if row > best.0 {
            best = (row, i + 1 - row, j + 1 - row);
        }
        i += 1;
        j += 1;
    }
    (best.0 >= AGREE).then_some((best.1, best.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens of one byte each, from `start` on: `ids` as their ids.
    fn tokens(start: usize, ids: &[u32]) -> Vec<TokenAt> {
        ids.iter().enumerate().map(|(i, &id)| TokenAt { id, start: start + i, end: start + i + 1 }).collect()
    }

    #[test]
    fn pieces_join_inside_the_longest_row_both_share() {
        let mut joiner = Joiner::default();
        // The text's tokens are 0..40. The first piece ends at 30 and its last token differs;
        // the second covers 10..40 and its first two differ, then a stray token at 14.
        let mut first = tokens(0, &(0..30).collect::<Vec<_>>());
        first[29].id = 99;
        let mut second = tokens(10, &(10..40).collect::<Vec<_>>());
        second[0].id = 98;
        second[1].id = 97;
        second[4].id = 96;
        assert_eq!(joiner.push(0, 30, first), Ok(vec![]), "nothing settled before the next piece");
        let settled = joiner.push(10, 40, second).expect("a seam");
        assert_eq!(settled, (0..15).collect::<Vec<_>>(), "the longest shared row begins at 15");
        assert_eq!(joiner.finish(), (15..40).collect::<Vec<_>>());
    }

    #[test]
    fn tokens_at_other_places_are_no_seam() {
        // Two-byte tokens of the same ids, the later piece's one byte off the earlier's: the
        // same ids in a row, never at the same places.
        let pairs = |start: usize, n: usize| -> Vec<TokenAt> {
            (0..n).map(|i| TokenAt { id: 7, start: start + 2 * i, end: start + 2 * i + 2 }).collect()
        };
        let mut joiner = Joiner::default();
        joiner.push(0, 30, pairs(0, 15)).expect("the first piece");
        assert_eq!(joiner.push(9, 41, pairs(9, 16)), Err(NoSeam { at: 9 }));
        // A row shorter than AGREE is no seam either.
        let mut joiner = Joiner::default();
        joiner.push(0, 30, tokens(0, &(0..30).collect::<Vec<_>>())).expect("the first piece");
        let start = 30 - (AGREE - 1);
        let short = tokens(start, &(start as u32..40).collect::<Vec<_>>());
        assert_eq!(joiner.push(start, 40, short), Err(NoSeam { at: start }));
    }

    #[test]
    fn pieces_without_overlap_follow_each_other() {
        let mut joiner = Joiner::default();
        assert_eq!(joiner.push(0, 3, tokens(0, &[1, 2, 3])), Ok(vec![]));
        assert_eq!(joiner.push(3, 5, tokens(3, &[4, 5])), Ok(vec![1, 2, 3]));
        assert_eq!(joiner.finish(), vec![4, 5]);
        assert!(joiner.finish().is_empty(), "given out once");
    }

    #[test]
    fn several_tokens_of_one_character_join_in_order() {
        // A three-byte character as three tokens at the same place, inside the shared row.
        let text: Vec<TokenAt> = (0..16u32)
            .map(|i| match i {
                5..=7 => TokenAt { id: i, start: 5, end: 8 },
                _ => TokenAt { id: i, start: i as usize, end: i as usize + 1 },
            })
            .collect();
        let mut joiner = Joiner::default();
        joiner.push(0, 12, text[..12].to_vec()).expect("the first piece");
        let settled = joiner.push(2, 16, text[2..].to_vec()).expect("a seam");
        assert_eq!(settled, vec![0, 1]);
        assert_eq!([settled, joiner.finish()].concat(), (0..16).collect::<Vec<_>>());
    }
}
