//! Seeds derived from the run's seed: every random stream of a run (the epochs' shuffles, each
//! replica's dropout, the augmentation's and the token windows' draws, the samples) is a
//! function of the run's seed and where the stream is used, so a run repeats bit for bit.

/// SplitMix64: derives independent seeds (shuffles, dropout streams) from the run's seed.
pub fn mix_seed(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
