//! How many CUDA devices a process will see, worked out from NVML and `CUDA_VISIBLE_DEVICES`
//! without initializing CUDA, as `torch.cuda.device_count()` does when it can (PyTorch reads
//! NVML first so that a parent process never creates a CUDA context before it forks or starts
//! workers). The dashboard front uses it: it checks `--devices` and starts the job, which alone
//! touches CUDA.
//!
//! The rules, from the CUDA runtime's documented behaviour: the variable lists ordinals or UUIDs
//! (`GPU-…`, `MIG-…`, any unique prefix); an entry that is not a valid device ends the list; a
//! repeated entry makes every device invisible.

/// What one entry of `CUDA_VISIBLE_DEVICES` names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Ordinal(u32),
    Uuid(String),
}

fn entry(text: &str) -> Option<Entry> {
    let t = text.trim();
    if t.starts_with("GPU-") || t.starts_with("MIG-") {
        return Some(Entry::Uuid(t.to_owned()));
    }
    // The runtime reads the leading digits, as strtoul does.
    let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(Entry::Ordinal)
}

/// The CUDA devices a process will see, from `CUDA_VISIBLE_DEVICES` (`var`) and the UUIDs of the
/// GPUs NVML shows (in NVML order). `None` when NVML cannot tell: MIG slices named by UUID, whose
/// UUIDs the GPU list does not hold.
pub fn visible_count(var: Option<&str>, nvml_uuids: &[String]) -> Option<usize> {
    let Some(var) = var else {
        return Some(nvml_uuids.len());
    };
    let mut seen: Vec<usize> = Vec::new();
    for text in var.split(',') {
        let found = match entry(text) {
            None => break,
            Some(Entry::Ordinal(i)) => ((i as usize) < nvml_uuids.len()).then_some(i as usize),
            Some(Entry::Uuid(u)) if u.starts_with("MIG-") => return None,
            Some(Entry::Uuid(u)) => {
                let matching: Vec<usize> =
                    (0..nvml_uuids.len()).filter(|&i| nvml_uuids[i].starts_with(u.as_str())).collect();
                // A prefix must name exactly one GPU.
                (matching.len() == 1).then(|| matching[0])
            }
        };
        match found {
            None => break,
            Some(i) if seen.contains(&i) => return Some(0),
            Some(i) => seen.push(i),
        }
    }
    Some(seen.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("GPU-{i}a2b3c4d-0000-1111-2222-33334444555{i}")).collect()
    }

    #[test]
    fn unset_shows_every_gpu_and_ordinals_count_up_to_the_first_bad_one() {
        let eight = uuids(8);
        assert_eq!(visible_count(None, &eight), Some(8));
        assert_eq!(visible_count(Some("4,5"), &eight), Some(2));
        assert_eq!(visible_count(Some(" 4 , 5 "), &eight), Some(2));
        assert_eq!(visible_count(Some("4,9,5"), &eight), Some(1));
        assert_eq!(visible_count(Some("-1"), &eight), Some(0));
        assert_eq!(visible_count(Some(""), &eight), Some(0));
        assert_eq!(visible_count(Some("0,x,1"), &eight), Some(1));
        assert_eq!(visible_count(Some("0,0"), &eight), Some(0));
        assert_eq!(visible_count(Some("0"), &[]), Some(0));
    }

    #[test]
    fn uuids_and_their_prefixes_name_gpus_and_mig_slices_are_not_counted_here() {
        let two = uuids(2);
        assert_eq!(visible_count(Some(&two[1]), &two), Some(1));
        assert_eq!(visible_count(Some("GPU-1a2b"), &two), Some(1));
        // An ambiguous prefix names no GPU.
        assert_eq!(visible_count(Some("GPU-"), &two), Some(0));
        assert_eq!(visible_count(Some(&format!("{},{}", two[0], two[0])), &two), Some(0));
        assert_eq!(visible_count(Some("MIG-5f1c0c4e-aaaa-bbbb-cccc-0123456789ab"), &two), None);
    }
}
