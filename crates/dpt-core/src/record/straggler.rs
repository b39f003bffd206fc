//! Stragglers: in data-parallel training every step waits for the slowest replica, so one slow
//! device (thermal throttling, a busy neighbour, a slower link) slows them all. A replica whose
//! step (data + forward/backward, averaged over a report window) is slower than the replicas'
//! median by more than [`MARGIN`] is one.

/// How much slower than the median a replica must be: 30 %, well above the few per cent by which
/// identical devices differ from window to window.
pub const MARGIN: f64 = 0.30;

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 0 { (v[mid - 1] + v[mid]) / 2.0 } else { v[mid] })
}

/// The replicas (indices into `step_secs`) slower than the median by more than [`MARGIN`].
pub fn stragglers(step_secs: &[f64]) -> Vec<usize> {
    if step_secs.len() < 2 {
        return Vec::new();
    }
    let Some(m) = median(step_secs).filter(|m| *m > 0.0) else { return Vec::new() };
    (0..step_secs.len()).filter(|&i| step_secs[i] > m * (1.0 + MARGIN)).collect()
}

/// The slowest of `step_secs` and the median of the others, when it is slower than that median
/// by more than [`MARGIN`]: the one the others wait for, as the bottleneck verdict names it.
/// Measured against the others alone, one slow replica of two counts at 1.3 times the other
/// (against the median of all it would need nearly twice).
pub fn slowest(step_secs: &[f64]) -> Option<(usize, f64)> {
    let worst = (0..step_secs.len()).max_by(|&a, &b| step_secs[a].total_cmp(&step_secs[b]))?;
    let others: Vec<f64> =
        step_secs.iter().enumerate().filter(|(i, _)| *i != worst).map(|(_, t)| *t).collect();
    let typical = median(&others).filter(|m| *m > 0.0)?;
    (step_secs[worst] > typical * (1.0 + MARGIN)).then_some((worst, typical))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_well_above_the_median_is_a_straggler() {
        assert_eq!(stragglers(&[0.010, 0.011, 0.010, 0.020]), vec![3]);
        assert_eq!(stragglers(&[0.010, 0.0125]), Vec::<usize>::new(), "within the margin");
        // With two replicas the median is their mean: 10 and 20 ms give 15, and 20 > 19.5.
        assert_eq!(stragglers(&[0.010, 0.020]), vec![1]);
        assert!(stragglers(&[0.010]).is_empty());
        assert!(stragglers(&[0.0, 0.0]).is_empty());
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
        assert_eq!(slowest(&[0.010, 0.014]), Some((1, 0.010)), "against the other alone");
        assert_eq!(slowest(&[0.010, 0.012, 0.020, 0.011]), Some((2, 0.011)));
        assert_eq!(slowest(&[0.010, 0.012]), None);
        assert_eq!(slowest(&[0.010]), None);
    }
}
