//! Summing the flat gradient buffers of all replicas, as the seed's `allreduce` does per tensor
//! but on one bucket holding every gradient.

use tch::Tensor;

/// Sums `grads` into `grads[0]`, then hands the sum to every replica on another device. Replicas
/// sharing replica 0's device read the sum from `grads[0]` directly; the returned vector says,
/// per replica, which buffer holds its reduced gradient.
pub fn allreduce_sum(grads: &mut [Tensor]) -> Vec<usize> {
    sum_into_first(grads);
    hand_out(grads)
}

/// Sums every replica's gradients into `grads[0]` (between the two halves, a multi-process run
/// sums `grads[0]` over the processes).
pub fn sum_into_first(grads: &mut [Tensor]) {
    let _guard = tch::no_grad_guard();
    let Some((first, rest)) = grads.split_first_mut() else {
        return;
    };
    let dev0 = first.device();
    for g in rest.iter() {
        if g.device() == dev0 {
            let _ = first.g_add_(g);
        } else {
            let _ = first.g_add_(&g.to_device(dev0));
        }
    }
}

/// Copies `grads[0]` to the replicas on other devices; returns which buffer each replica reads.
pub fn hand_out(grads: &mut [Tensor]) -> Vec<usize> {
    let _guard = tch::no_grad_guard();
    let Some((first, rest)) = grads.split_first_mut() else {
        return Vec::new();
    };
    let dev0 = first.device();
    let mut holder = vec![0];
    for (i, g) in rest.iter_mut().enumerate() {
        if g.device() == dev0 {
            holder.push(0);
        } else {
            g.copy_(first);
            holder.push(i + 1);
        }
    }
    holder
}

#[cfg(test)]
mod tests {
    use super::allreduce_sum;
    use tch::Tensor;

    #[test]
    fn sums_like_the_seed_example() {
        let mut data = vec![Tensor::from_slice(&[1.0f32, 1.0]), Tensor::from_slice(&[2.0f32, 2.0])];
        let holders = allreduce_sum(&mut data);
        assert_eq!(holders, vec![0, 0]);
        assert_eq!(Vec::<f32>::try_from(&data[0]).unwrap(), vec![3.0, 3.0]);
    }
}
