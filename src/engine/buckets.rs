//! Gradient buckets: the flat gradient buffer cut into contiguous ranges that are reduced one by
//! one while the backward pass still runs, as DDP's reducer does. The parameters go into
//! buckets in reverse order, the order the backward pass makes their gradients in
//! (`torch.nn.parallel.DistributedDataParallel` assigns `reversed(parameters)` with
//! `dist._compute_bucket_assignment_by_size`); the first bucket is small so that the first
//! collective starts early (DDP's `_DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB), the others hold up to
//! the cap (DDP's `bucket_cap_mb`, 25 MiB by default). As in DDP, a parameter joins the open
//! bucket and the bucket closes once it has reached its limit. Unlike DDP, a bucket is
//! a range of the flat buffer, never a copy: it also closes where a frozen parameter would
//! break the range.

/// Bytes of one gradient scalar (the flat buffers are `f32`).
const SCALAR_BYTES: i64 = 4;

/// DDP's first bucket: 1 MiB.
pub const FIRST_BUCKET_BYTES: i64 = 1 << 20;

/// The buckets of a model's trainable gradients, in the order they are reduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    /// Each bucket's `(offset, length)` in the flat gradient buffer, first reduced first.
    pub ranges: Vec<(i64, i64)>,
    /// The bucket of each trainable parameter (by its position among the trainable ones);
    /// `None` for an empty tensor, which no backward pass reports.
    of_param: Vec<Option<usize>>,
    /// How many parameters each bucket waits for.
    sizes: Vec<usize>,
}

impl Buckets {
    /// Buckets for the tensors at `segments` (`(offset, scalars)` of every tensor of the flat
    /// buffer, in order), of which `trainable` (ascending indices) train; the first bucket
    /// closes at `first_bytes`, the others at `cap_bytes`.
    pub fn plan(segments: &[(i64, i64)], trainable: &[usize], first_bytes: i64, cap_bytes: i64) -> Buckets {
        let mut b = Buckets { ranges: Vec::new(), of_param: vec![None; trainable.len()], sizes: Vec::new() };
        let mut open = false;
        for (k, &i) in trainable.iter().enumerate().rev() {
            let (offset, len) = segments[i];
            if len == 0 {
                continue;
            }
            let joins = open && b.ranges.last().is_some_and(|&(lo, _)| lo == offset + len);
            if !joins {
                b.ranges.push((offset + len, 0));
                b.sizes.push(0);
            }
            let last = b.ranges.len() - 1;
            let range = &mut b.ranges[last];
            *range = (offset, range.1 + len);
            b.sizes[last] += 1;
            b.of_param[k] = Some(last);
            let limit = if last == 0 { first_bytes } else { cap_bytes };
            open = range.1 * SCALAR_BYTES < limit;
        }
        b
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there are none (a model without trainable scalars).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The bucket of trainable parameter `k`.
    pub fn of(&self, k: usize) -> Option<usize> {
        self.of_param.get(k).copied().flatten()
    }

    /// How many parameters bucket `b` holds.
    pub fn params_in(&self, b: usize) -> usize {
        self.sizes[b]
    }
}

/// Which buckets have been launched, given the replicas' reports: bucket `b` is launched once
/// every local replica has reported it, and only after bucket `b - 1`, so that every rank
/// issues the same collectives in the same order.
#[derive(Debug)]
pub struct Readiness {
    /// Per bucket, the replicas that have reported it.
    reported: Vec<Vec<bool>>,
    replicas: usize,
    /// The next bucket to launch.
    next: usize,
}

impl Readiness {
    pub fn new(buckets: usize, replicas: usize) -> Readiness {
        Readiness { reported: vec![vec![false; replicas]; buckets], replicas, next: 0 }
    }

    /// Replica `r` has bucket `b`'s gradients; returns the buckets that may be launched now,
    /// in order.
    pub fn report(&mut self, r: usize, b: usize) -> std::ops::Range<usize> {
        if let Some(slot) = self.reported.get_mut(b).and_then(|v| v.get_mut(r)) {
            *slot = true;
        }
        self.advance()
    }

    /// Replica `r` has finished its backward pass: all its buckets are ready.
    pub fn finished(&mut self, r: usize) -> std::ops::Range<usize> {
        for v in &mut self.reported {
            if let Some(slot) = v.get_mut(r) {
                *slot = true;
            }
        }
        self.advance()
    }

    /// Whether every bucket has been launched.
    #[cfg(test)]
    fn all_launched(&self) -> bool {
        self.next == self.reported.len()
    }

    fn advance(&mut self) -> std::ops::Range<usize> {
        let from = self.next;
        while self.reported.get(self.next).is_some_and(|v| v.iter().filter(|&&x| x).count() == self.replicas)
        {
            self.next += 1;
        }
        from..self.next
    }
}

#[cfg(test)]
mod tests {
    use super::{Buckets, Readiness};

    /// Tensors of `sizes` scalars laid out one after the other.
    fn segments(sizes: &[i64]) -> Vec<(i64, i64)> {
        let mut at = 0;
        sizes
            .iter()
            .map(|&n| {
                at += n;
                (at - n, n)
            })
            .collect()
    }

    #[test]
    fn reverse_order_first_bucket_small_then_up_to_the_cap() {
        // Four tensors of 100 scalars (400 bytes): first bucket 400 bytes, the others 800.
        let segs = segments(&[100, 100, 100, 100]);
        let b = Buckets::plan(&segs, &[0, 1, 2, 3], 400, 800);
        assert_eq!(b.ranges, vec![(300, 100), (100, 200), (0, 100)]);
        assert_eq!((b.of(3), b.of(2), b.of(1), b.of(0)), (Some(0), Some(1), Some(1), Some(2)));
        assert_eq!((b.params_in(0), b.params_in(1), b.params_in(2)), (1, 2, 1));
    }

    #[test]
    fn a_bucket_closes_at_its_limit_and_frozen_tensors_break_ranges() {
        let segs = segments(&[10, 1000, 10, 10, 10]);
        let b = Buckets::plan(&segs, &[0, 1, 2, 3, 4], 1 << 20, 100);
        // Under 1 MiB in all: one bucket.
        assert_eq!(b.ranges, vec![(0, 1040)]);
        let b = Buckets::plan(&segs, &[0, 1, 2, 3, 4], 80, 100);
        // 4 and 3 reach the first bucket's 80 bytes; 2 opens the next, which 1 overfills.
        assert_eq!(b.ranges, vec![(1020, 20), (10, 1010), (0, 10)]);
        // Tensor 2 frozen: 3 and 4 cannot join 1 across it.
        let b = Buckets::plan(&segs, &[0, 1, 3, 4], 1 << 20, 1 << 20);
        assert_eq!(b.ranges, vec![(1020, 20), (0, 1010)]);
        assert_eq!((b.of(0), b.of(1), b.of(2), b.of(3)), (Some(1), Some(1), Some(0), Some(0)));
    }

    #[test]
    fn empty_tensors_belong_to_no_bucket() {
        let segs = segments(&[10, 0, 10]);
        let b = Buckets::plan(&segs, &[0, 1, 2], 1 << 20, 1 << 20);
        assert_eq!(b.ranges, vec![(0, 20)]);
        assert_eq!(b.of(1), None);
        assert_eq!(b.params_in(0), 2);
    }

    #[test]
    fn buckets_launch_in_order_once_every_replica_has_them() {
        let mut r = Readiness::new(3, 2);
        assert!(r.report(0, 1).is_empty(), "bucket 1 waits for bucket 0");
        assert!(r.report(0, 0).is_empty(), "bucket 0 waits for replica 1");
        assert_eq!(r.report(1, 0), 0..1);
        assert_eq!(r.report(1, 1), 1..2);
        assert!(!r.all_launched());
        assert!(r.finished(1).is_empty(), "replica 0 has not reported bucket 2");
        assert_eq!(r.finished(0), 2..3);
        assert!(r.all_launched());
    }
}
