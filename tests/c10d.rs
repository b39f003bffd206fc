//! The C++ shim over libtorch's c10d, through its safe Rust face: a TCPStore rendezvous, Gloo
//! collectives between two ranks (threads here; processes in tests/distributed.rs), timeouts
//! and C++ exceptions arriving as errors, and the NCCL entry points failing cleanly without a
//! GPU.

use std::time::{Duration, Instant};

use dpt_sys::c10d::{nccl_local_allreduce, Backend, Group, ReduceOp, Store};
use tch::Tensor;

const T: Duration = Duration::from_secs(30);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn rank(port: u16, rank: usize) -> std::thread::JoinHandle<(Vec<f32>, Vec<f32>)> {
    std::thread::spawn(move || {
        let store = Store::tcp("127.0.0.1", port, 2, rank == 0, T).unwrap();
        let group = Group::new(Backend::Gloo, &store.prefixed("test/").unwrap(), rank, 2, T).unwrap();
        let mut t = [Tensor::from_slice(&[1.0f32 + rank as f32 * 2.0, 2.0 + rank as f32 * 2.0])];
        group.allreduce(&mut t, ReduceOp::Sum).unwrap().wait(T).unwrap();
        let mut m = [Tensor::from_slice(&[rank as f64 * 3.0, 5.0 - rank as f64])];
        group.allreduce(&mut m, ReduceOp::Max).unwrap().wait(T).unwrap();
        assert_eq!(Vec::<f64>::try_from(&m[0]).unwrap(), vec![3.0, 5.0]);
        let sum = Vec::<f32>::try_from(&t[0]).unwrap();
        let mut b = [Tensor::from_slice(&[rank as f32 + 10.0; 3])];
        group.broadcast(&mut b, 1).unwrap().wait(T).unwrap();
        (sum, Vec::<f32>::try_from(&b[0]).unwrap())
    })
}

#[test]
fn two_ranks_allreduce_and_broadcast_through_gloo() {
    let port = free_port();
    let ranks = [rank(port, 0), rank(port, 1)];
    for r in ranks {
        let (sum, bcast) = r.join().unwrap();
        assert_eq!(sum, vec![4.0, 6.0]);
        assert_eq!(bcast, vec![11.0; 3], "rank 1's tensor everywhere");
    }
}

#[test]
fn the_store_sets_gets_counts_and_times_out() {
    let port = free_port();
    let store = Store::tcp("127.0.0.1", port, 1, true, Duration::from_millis(300)).unwrap();
    store.set("a", b"hello").unwrap();
    assert_eq!(store.get("a").unwrap(), b"hello");
    assert_eq!(store.add("n", 2).unwrap(), 2);
    assert_eq!(store.add("n", 3).unwrap(), 5);
    assert!(store.check(&["a"]).unwrap() && !store.check(&["missing"]).unwrap());
    let t0 = Instant::now();
    let err = store.wait(&["never"], Duration::from_millis(300)).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(err.0.to_lowercase().contains("timeout") || err.0.to_lowercase().contains("timed out"), "{err}");
    // A key with a NUL byte is refused before reaching C++.
    assert!(store.set("a\0b", b"").is_err());
}

#[test]
fn a_store_nobody_hosts_is_an_error_not_a_crash() {
    let port = free_port();
    let err = Store::tcp("127.0.0.1", port, 2, false, Duration::from_millis(500)).err().expect("no server");
    assert!(!err.0.is_empty());
}

#[test]
fn nccl_without_a_gpu_fails_cleanly() {
    let mut cpu = [Tensor::from_slice(&[1.0f32]), Tensor::from_slice(&[2.0f32])];
    let err = nccl_local_allreduce(&mut cpu).unwrap_err();
    assert!(err.0.contains("NCCL needs CUDA tensors"), "{err}");
    let port = free_port();
    let store = Store::tcp("127.0.0.1", port, 1, true, T).unwrap();
    if tch::Cuda::device_count() == 0 {
        assert!(Group::new(Backend::Nccl, &store, 0, 1, T).is_err(), "no NCCL group without a GPU");
    }
}

#[test]
fn cuda_identities_are_written_as_nvml_writes_them() {
    let id = dpt_sys::c10d::CudaIdentity {
        major: 9,
        minor: 0,
        pci_domain: 0,
        pci_bus: 0x3b,
        pci_device: 0,
        uuid: [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
        ],
    };
    assert_eq!(id.nvml_uuid(), "GPU-12345678-9abc-def0-0123-456789abcdef");
    assert_eq!(id.nvml_pci_bus_id(), "00000000:3B:00.0");
    if tch::Cuda::device_count() == 0 {
        assert!(dpt_sys::c10d::cuda_identity(0).is_err(), "no CUDA device 0 here: an error, not a crash");
    }
}
