//! Splitting a global batch over the replicas.

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

#[cfg(test)]
mod tests {
    use super::shards;

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
