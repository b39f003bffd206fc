//! Summing the flat gradient buffers of all replicas, as the reference programs' `allreduce` does per tensor
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

/// How this process sums its replicas' gradients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalReduce {
    /// Through replica 0's device by tensor copies (CPU replicas, one GPU, or no NCCL).
    Copies,
    /// One NCCL call over one tensor per distinct GPU, as `nn.DataParallel` does; replicas
    /// sharing a GPU are summed on it first. `groups` lists the replicas of each GPU, the first
    /// of each holding the GPU's sum.
    Nccl { groups: Vec<Vec<usize>> },
}

impl LocalReduce {
    /// The path for replicas on `devices`: NCCL when they span two GPUs or more and nothing
    /// else, and the build has NCCL; tensor copies otherwise.
    pub fn plan(devices: &[dpt_core::device::DeviceId], nccl: bool) -> LocalReduce {
        use dpt_core::device::DeviceId;
        if !nccl || !devices.iter().all(|d| matches!(d, DeviceId::Cuda(_))) {
            return LocalReduce::Copies;
        }
        let mut groups: Vec<(DeviceId, Vec<usize>)> = Vec::new();
        for (replica, d) in devices.iter().enumerate() {
            match groups.iter_mut().find(|(g, _)| g == d) {
                Some((_, members)) => members.push(replica),
                None => groups.push((*d, vec![replica])),
            }
        }
        if groups.len() < 2 {
            return LocalReduce::Copies;
        }
        LocalReduce::Nccl { groups: groups.into_iter().map(|(_, m)| m).collect() }
    }

    /// For the screen and the record: which path runs.
    pub fn describe(&self, devices: &[dpt_core::device::DeviceId]) -> String {
        match self {
            LocalReduce::Nccl { groups } => format!("nccl over {} GPUs", groups.len()),
            LocalReduce::Copies if devices.len() < 2 => "none (one replica)".to_owned(),
            LocalReduce::Copies => {
                format!("copies through {}", devices.first().map_or("-".into(), ToString::to_string))
            }
        }
    }
}

#[cfg(test)]
mod plan_tests {
    use super::LocalReduce;
    use dpt_core::device::DeviceId::{Cpu, Cuda};

    #[test]
    fn nccl_only_across_two_gpus_or_more() {
        let nccl =
            |groups: &[&[usize]]| LocalReduce::Nccl { groups: groups.iter().map(|g| g.to_vec()).collect() };
        assert_eq!(LocalReduce::plan(&[Cuda(0), Cuda(1)], true), nccl(&[&[0], &[1]]));
        assert_eq!(LocalReduce::plan(&[Cuda(1), Cuda(1), Cuda(0)], true), nccl(&[&[0, 1], &[2]]));
        assert_eq!(
            LocalReduce::plan(&[Cuda(0), Cuda(0)], true),
            LocalReduce::Copies,
            "one GPU sums in place"
        );
        assert_eq!(LocalReduce::plan(&[Cpu, Cpu], true), LocalReduce::Copies);
        assert_eq!(LocalReduce::plan(&[Cuda(0), Cpu], true), LocalReduce::Copies, "NCCL takes GPUs only");
        assert_eq!(LocalReduce::plan(&[Cuda(0), Cuda(1)], false), LocalReduce::Copies, "the fallback");
        assert_eq!(
            LocalReduce::plan(&[Cuda(0), Cuda(1)], true).describe(&[Cuda(0), Cuda(1)]),
            "nccl over 2 GPUs"
        );
        assert_eq!(LocalReduce::Copies.describe(&[Cpu, Cpu]), "copies through cpu");
    }
}
