//! The flags of the streaming loader: which loader, the memory the data may take, the queue
//! depth and the decode threads.

use dpt_tui::data::Loader;

use super::values::{parse, parse_bytes};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct LoaderArgs {
    /// How the data reaches the replicas: resident (decoded once into memory and every
    /// replica's device), stream (read and decoded batch by batch while training, within
    /// --data-memory; image folders, WebDataset shards, uint8 .npy arrays, CIFAR-10 batches and
    /// uncompressed IDX files), or auto (resident when the decoded images fit in --data-memory)
    /// [default: auto, or a resumed run's own].
    #[arg(long, value_name = "auto|resident|stream", value_parser = parse::<Loader>)]
    pub loader: Option<Loader>,

    /// The host memory the data may take, such as 512M or 8G: auto's threshold, and the
    /// streaming loader's bound on its decoded batches [default: 2G].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub data_memory: Option<u64>,

    /// Streaming: batches decoded ahead of each replica, at most (fewer when --data-memory
    /// holds fewer) [default: 2].
    #[arg(long, value_name = "N")]
    pub prefetch: Option<usize>,

    /// Streaming: threads decoding images, shared by the process's replicas [default: the
    /// process's cores].
    #[arg(long, value_name = "N")]
    pub decode_threads: Option<usize>,
}
