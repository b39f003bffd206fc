//! Splitting a global batch over the replicas, and the seeded order and streams the split
//! draws from.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The order in which epoch `epoch` visits the `n` training samples.
pub fn epoch_order(seed: u64, epoch: usize, n: usize) -> Vec<i64> {
    let mut order: Vec<i64> = (0..n as i64).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(dpt_core::seed::mix_seed(seed, epoch as u64)));
    order
}

/// Contiguous shards `(offset, len)` of a batch of `n` rows over `k` replicas. Sizes differ by
/// at most one, the larger ones first, so a last partial batch is spread as evenly as the rest.
pub fn shards(n: usize, k: usize) -> Vec<(usize, usize)> {
    assert!(k > 0, "at least one replica");
    let (base, extra) = (n / k, n % k);
    let mut offset = 0;
    (0..k)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let shard = (offset, len);
            offset += len;
            shard
        })
        .collect()
}

/// Rows `(start, len)` of the epoch order that step `step` trains on: a global batch of
/// `batch`, the last one of an epoch of `n` samples shorter.
pub fn step_rows(step: usize, batch: usize, n: usize) -> (usize, usize) {
    let start = step * batch;
    (start, batch.min(n.saturating_sub(start)))
}

/// The rows global replica `replica` of `total` trains on at every step from `first` to the
/// end of an epoch of `n` samples: its shard of each step's rows.
pub fn replica_rows(
    first: usize,
    steps: usize,
    (batch, n): (usize, usize),
    (replica, total): (usize, usize),
) -> Vec<(usize, usize)> {
    (first..steps)
        .map(|step| {
            let (start, len) = step_rows(step, batch, n);
            let (at, part) = shards(len, total)[replica];
            (start + at, part)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{replica_rows, shards};

    #[test]
    fn the_replicas_rows_cover_the_epoch_once() {
        // 10 samples, batches of 4 over 3 replicas: steps 0..3, the last of 2 rows.
        let mut seen: Vec<usize> =
            (0..3).flat_map(|r| replica_rows(0, 3, (4, 10), (r, 3))).flat_map(|(s, l)| s..s + l).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(replica_rows(2, 3, (4, 10), (2, 3)), vec![(10, 0)], "an empty shard stays a step");
    }

    #[test]
    fn balanced_and_covering() {
        for n in 0..40 {
            for k in 1..6 {
                let s = shards(n, k);
                assert_eq!(s.len(), k);
                assert_eq!(s.iter().map(|x| x.1).sum::<usize>(), n);
                let (min, max) = (s.iter().map(|x| x.1).min().unwrap(), s.iter().map(|x| x.1).max().unwrap());
                assert!(max - min <= 1);
                for w in s.windows(2) {
                    assert_eq!(w[0].0 + w[0].1, w[1].0);
                }
            }
        }
        assert_eq!(shards(256, 3), vec![(0, 86), (86, 85), (171, 85)]);
    }
}
