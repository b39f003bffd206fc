//! Gradient buckets: the flat gradient buffer cut into contiguous ranges that are reduced one by
//! one while the backward pass still runs, as DDP's reducer does. The parameters go into
//! buckets in reverse order, the order the backward pass makes their gradients in
//! (`torch.nn.parallel.DistributedDataParallel` assigns `reversed(parameters)` with
//! `dist._compute_bucket_assignment_by_size`); the first bucket is small so that the first
//! collective starts early (DDP's `_DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB), the others hold up to
//! the cap (DDP's `bucket_cap_mb`, 25 MiB by default). As in DDP, a parameter joins the open
//! bucket and the bucket closes once it has reached its limit. Unlike DDP, a bucket is
//! a range of the flat buffer, never a copy: it also closes where a frozen parameter would
//! break the range. After the first step, the buckets are planned again in the order the
//! gradients arrived in, as DDP's reducer rebuilds them ([`Buckets::replanned`]).

use super::flat::align_up;
use dpt_core::optim::Span;

/// Bytes of one gradient scalar (the flat buffers are `f32`).
const SCALAR_BYTES: i64 = 4;

/// DDP's first bucket: 1 MiB.
pub const FIRST_BUCKET_BYTES: i64 = 1 << 20;

/// The buckets of a model's trainable gradients, in the order they are reduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    /// Each bucket's span of the flat gradient buffer, first reduced first.
    pub ranges: Vec<Span>,
    /// The bucket of each trainable parameter (by its position among the trainable ones);
    /// `None` for an empty tensor, which no backward pass reports.
    of_param: Vec<Option<usize>>,
    /// How many parameters each bucket waits for.
    sizes: Vec<usize>,
    /// What the plan was made from, for [`Buckets::replanned`]: each trainable parameter's
    /// `(offset, scalars)`, and the first bucket's and the others' limits in bytes.
    params: Vec<(i64, i64)>,
    limits: (i64, i64),
}

impl Buckets {
    /// Buckets for the tensors at `segments` (`(offset, scalars)` of every tensor of the flat
    /// buffer, in order), of which `trainable` (ascending indices) train, in reverse order;
    /// the first bucket closes at `first_bytes`, the others at `cap_bytes`.
    pub fn plan(segments: &[(i64, i64)], trainable: &[usize], first_bytes: i64, cap_bytes: i64) -> Buckets {
        Buckets::plan_in_order(segments, trainable, &[], first_bytes, cap_bytes)
    }

    /// Buckets re-planned from the order the gradients arrived in (`arrival`: positions among
    /// the trainable parameters, first arrived first), as DDP's reducer rebuilds its buckets
    /// after the first iteration (`Reducer::rebuild_buckets`): each parameter in that order
    /// joins the open bucket, which closes once it reaches its limit. The parameters that never
    /// arrived follow in reverse order. A bucket stays one range of the flat buffer, so a
    /// parameter joins only when the parameters between it and the bucket are not placed yet
    /// (they join with it: a layer whose weight's gradient comes before its bias's keeps one
    /// bucket) and no frozen one lies between; otherwise it opens a new bucket. With `arrival`
    /// the reverse of the declared order, the plan is [`Buckets::plan`]'s.
    pub fn plan_in_order(
        segments: &[(i64, i64)],
        trainable: &[usize],
        arrival: &[usize],
        first_bytes: i64,
        cap_bytes: i64,
    ) -> Buckets {
        let order = complete(arrival, trainable.len());
        let params: Vec<(i64, i64)> = trainable.iter().map(|&i| segments[i]).collect();
        let mut b = Buckets {
            ranges: Vec::new(),
            of_param: vec![None; trainable.len()],
            sizes: Vec::new(),
            params,
            limits: (first_bytes, cap_bytes),
        };
        // The open bucket's first and last parameter.
        let mut open: Option<(usize, usize)> = None;
        for k in order {
            if b.params[k].1 == 0 || b.of_param[k].is_some() {
                continue;
            }
            let (lo, hi) = match open.filter(|&span| b.reaches(span, k)) {
                Some((lo, hi)) => (lo.min(k), hi.max(k)),
                None => {
                    b.ranges.push(Span { start: b.params[k].0, len: 0 });
                    b.sizes.push(0);
                    (k, k)
                }
            };
            let last = b.ranges.len() - 1;
            for m in lo..=hi {
                if b.params[m].1 > 0 && b.of_param[m].is_none() {
                    b.of_param[m] = Some(last);
                    b.sizes[last] += 1;
                }
            }
            let (start, end) = (b.params[lo].0, b.params[hi].0 + b.params[hi].1);
            b.ranges[last] = Span::between(start, end);
            let limit = if last == 0 { first_bytes } else { cap_bytes };
            open = ((end - start) * SCALAR_BYTES < limit).then_some((lo, hi));
        }
        b
    }

    /// Whether the bucket of parameters `lo..=hi` can grow to take parameter `k` (outside it):
    /// every parameter between them lies next to its neighbours in the flat buffer (no frozen
    /// tensor between) and is not in a bucket yet.
    fn reaches(&self, (lo, hi): (usize, usize), k: usize) -> bool {
        let (from, to) = if k > hi { (hi, k) } else { (k, lo) };
        // Neighbours in the flat buffer: nothing between them, or the alignment's pad only.
        let next_to = |m: usize| {
            let (end, next) = (self.params[m].0 + self.params[m].1, self.params[m + 1].0);
            end == next || align_up(end) == next
        };
        let free = |m: usize| self.params[m].1 == 0 || self.of_param[m].is_none();
        (from..to).all(next_to) && (from + 1..to).all(free)
    }

    /// The same parameters and limits re-planned in `arrival` order (see
    /// [`Buckets::plan_in_order`]).
    pub fn replanned(&self, arrival: &[usize]) -> Buckets {
        let segments = &self.params;
        let trainable: Vec<usize> = (0..segments.len()).collect();
        Buckets::plan_in_order(segments, &trainable, arrival, self.limits.0, self.limits.1)
    }

    /// Whether `self`, a re-plan of `current` under the same limits, cuts the gradients into
    /// more buckets than `current` does: an arrival order that interleaves the flat layout
    /// strands parameters between buckets already closed, each stranded run a small bucket and
    /// a collective of its own, whose launches cost more than the earlier start gains. Such a
    /// plan is not adopted.
    pub fn fragments(&self, current: &Buckets) -> bool {
        self.len() > current.len()
    }

    /// `arrival` completed to an order of every trainable parameter: the ones it lacks follow
    /// in reverse order, repeats and unknown positions are dropped (the same length on every
    /// rank, for the broadcast of rank 0's).
    pub fn arrival_order(&self, arrival: &[usize]) -> Vec<usize> {
        complete(arrival, self.params.len())
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

    /// Where trainable parameter `k`'s gradient lies in its bucket: (bucket, offset from the
    /// bucket's start, scalars); `None` for an empty tensor.
    pub fn place(&self, k: usize) -> Option<(usize, i64, i64)> {
        let b = self.of(k)?;
        let (offset, scalars) = self.params[k];
        Some((b, offset - self.ranges[b].start, scalars))
    }

    /// How many parameters bucket `b` holds.
    pub fn params_in(&self, b: usize) -> usize {
        self.sizes[b]
    }
}

/// `arrival`, then the rest of `0..n` in reverse order, each position once.
fn complete(arrival: &[usize], n: usize) -> Vec<usize> {
    let mut seen = vec![false; n];
    arrival
        .iter()
        .copied()
        .chain((0..n).rev())
        .filter(|&k| k < n && !std::mem::replace(&mut seen[k], true))
        .collect()
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

    /// Each bucket's span as (start, len).
    fn spans(b: &Buckets) -> Vec<(i64, i64)> {
        b.ranges.iter().map(|r| (r.start, r.len)).collect()
    }

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
        assert_eq!(spans(&b), vec![(300, 100), (100, 200), (0, 100)]);
        assert_eq!((b.of(3), b.of(2), b.of(1), b.of(0)), (Some(0), Some(1), Some(1), Some(2)));
        assert_eq!((b.params_in(0), b.params_in(1), b.params_in(2)), (1, 2, 1));
    }

    #[test]
    fn a_bucket_closes_at_its_limit_and_frozen_tensors_break_ranges() {
        let segs = segments(&[10, 1000, 10, 10, 10]);
        let b = Buckets::plan(&segs, &[0, 1, 2, 3, 4], 1 << 20, 100);
        // Under 1 MiB in all: one bucket.
        assert_eq!(spans(&b), vec![(0, 1040)]);
        let b = Buckets::plan(&segs, &[0, 1, 2, 3, 4], 80, 100);
        // 4 and 3 reach the first bucket's 80 bytes; 2 opens the next, which 1 overfills.
        assert_eq!(spans(&b), vec![(1020, 20), (10, 1010), (0, 10)]);
        // Tensor 2 frozen: 3 and 4 cannot join 1 across it.
        let b = Buckets::plan(&segs, &[0, 1, 3, 4], 1 << 20, 1 << 20);
        assert_eq!(spans(&b), vec![(1020, 20), (0, 1010)]);
        assert_eq!((b.of(0), b.of(1), b.of(2), b.of(3)), (Some(1), Some(1), Some(0), Some(0)));
    }

    #[test]
    fn tensors_at_aligned_offsets_share_a_bucket_across_their_pads() {
        let (offsets, _) = crate::engine::flat::aligned_offsets([10, 100, 5]);
        let segs: Vec<(i64, i64)> = offsets.into_iter().zip([10, 100, 5]).collect();
        let b = Buckets::plan(&segs, &[0, 1, 2], 1 << 20, 1 << 20);
        assert_eq!(spans(&b), vec![(0, 197)], "one range, the pads inside");
    }

    #[test]
    fn empty_tensors_belong_to_no_bucket() {
        let segs = segments(&[10, 0, 10]);
        let b = Buckets::plan(&segs, &[0, 1, 2], 1 << 20, 1 << 20);
        assert_eq!(spans(&b), vec![(0, 20)]);
        assert_eq!(b.of(1), None);
        assert_eq!(b.params_in(0), 2);
    }

    #[test]
    fn the_declared_order_reversed_re_plans_to_the_same_buckets() {
        let segs = segments(&[10, 1000, 0, 10, 10, 10]);
        let trainable = [0, 1, 2, 3, 4, 5];
        for (first, cap) in [(80, 100), (1 << 20, 1 << 20), (40, 40)] {
            let planned = Buckets::plan(&segs, &trainable, first, cap);
            let reverse: Vec<usize> = (0..6).rev().collect();
            assert_eq!(Buckets::plan_in_order(&segs, &trainable, &reverse, first, cap), planned);
            // Nothing recorded (no gradient arrived): the declared plan too.
            assert_eq!(Buckets::plan_in_order(&segs, &trainable, &[], first, cap), planned);
        }
    }

    #[test]
    fn an_arrival_order_that_interleaves_the_layout_would_fragment_and_is_not_adopted() {
        // Eight tensors of 100 scalars (400 bytes); first bucket one tensor, then two a bucket.
        let segs = segments(&[100; 8]);
        let all: Vec<usize> = (0..8).collect();
        let current = Buckets::plan(&segs, &all, 400, 800);
        assert_eq!(current.len(), 5);
        // Every other one arriving first strands 1, 5 and 7 between closed buckets.
        let interleaved = current.replanned(&[0, 2, 4, 6, 1, 3, 5, 7]);
        assert_eq!(interleaved.len(), 6, "{:?}", interleaved.ranges);
        assert!(interleaved.fragments(&current));
        // Layers used out of declared order, pairs kept together: as many buckets, adopted.
        let pairs = current.replanned(&[1, 0, 3, 2, 5, 4, 7, 6]);
        assert!(!pairs.fragments(&current), "{:?}", pairs.ranges);
    }

    #[test]
    fn a_model_using_its_layers_out_of_declared_order_gets_buckets_in_arrival_order() {
        // Declared a, b, c, d (100 scalars each); the forward pass uses c, d, a, b, so the
        // backward pass makes b, a, d, c.
        let segs = segments(&[100, 100, 100, 100]);
        let all = [0, 1, 2, 3];
        let declared = Buckets::plan(&segs, &all, 800, 800);
        // The declared plan's first bucket holds d, whose gradient comes third.
        assert_eq!(spans(&declared), vec![(200, 200), (0, 200)]);
        assert_eq!(declared.of(3), Some(0));
        let b = Buckets::plan_in_order(&segs, &all, &[1, 0, 3, 2], 800, 800);
        // b then a (a lies just before b): one range; then d, c.
        assert_eq!(spans(&b), vec![(0, 200), (200, 200)]);
        assert_eq!((b.of(1), b.of(0), b.of(3), b.of(2)), (Some(0), Some(0), Some(1), Some(1)));
        assert_eq!((b.params_in(0), b.params_in(1)), (2, 2));
        // The declared order itself (a model used front to back, its hooks firing a first):
        // buckets grow upwards and stay full.
        let b = Buckets::plan_in_order(&segs, &all, &[0, 1, 2, 3], 800, 800);
        assert_eq!(spans(&b), vec![(0, 200), (200, 200)]);
        // 1 arrives before 2, which lies between it and the open bucket (3): the bucket takes 2
        // with 1 and stays one range (a layer whose weight's gradient comes before its bias's).
        let b = Buckets::plan_in_order(&segs, &all, &[3, 1, 2, 0], 1 << 20, 1 << 20);
        assert_eq!(spans(&b), vec![(0, 400)]);
        assert_eq!(b.params_in(0), 4);
        // The parameter between them already in a closed bucket: a new bucket.
        let b = Buckets::plan_in_order(&segs, &all, &[2, 0, 1, 3], 400, 1 << 20);
        assert_eq!(spans(&b), vec![(200, 100), (0, 200), (300, 100)]);
        assert_eq!((b.of(2), b.of(0), b.of(1), b.of(3)), (Some(0), Some(1), Some(1), Some(2)));
        // A parameter that took no part (2) follows the ones that did.
        let b = Buckets::plan_in_order(&segs, &all, &[3, 1, 0], 800, 800);
        assert_eq!(spans(&b), vec![(100, 300), (0, 100)]);
        assert_eq!((b.of(3), b.of(1), b.of(2), b.of(0)), (Some(0), Some(0), Some(0), Some(1)));
        // A frozen tensor between two parameters keeps them apart whatever the order.
        let segs = segments(&[100, 100, 100]);
        let b = Buckets::plan_in_order(&segs, &[0, 2], &[0, 1], 1 << 20, 1 << 20);
        assert_eq!(spans(&b), vec![(0, 100), (200, 100)]);
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
