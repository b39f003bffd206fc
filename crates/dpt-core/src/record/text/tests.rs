//! The narrator's lines, word for word.

use super::*;

#[test]
fn the_loader_says_when_the_replicas_wait() {
    let l = crate::record::LoaderStats { ready: 1.75, depth: 2, images_per_sec: 3250.4, threads: None };
    assert_eq!(loader(&l), "1.8/2 ready, 3250 img/s decoding");
    let starved = crate::record::LoaderStats { ready: 0.2, ..l };
    assert!(loader(&starved).ends_with("(replicas wait for data)"));
}

#[test]
fn learning_rates_read_as_written() {
    for (lr, text) in [
        (0.001, "0.001"),
        (0.0009998741276738751, "0.0009999"),
        (0.1, "0.1"),
        (3e-6, "3e-6"),
        (5.126150373813143e-8, "5.126e-8"),
        (2.5, "2.5"),
        (0.0, "0"),
    ] {
        assert_eq!(lr_text(lr), text);
    }
}

#[test]
fn groups_digits() {
    assert_eq!(thousands(129_068), "129,068");
    assert_eq!(thousands(11_175_818), "11,175,818");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(-1234), "-1,234");
}

/// A narrator that has read the start of a default run (classes, its epochs).
fn started() -> Narrator {
    let mut n = Narrator::default();
    n.line(&Record::Start(Box::default())).expect("a start line");
    n
}

fn window(model_flops: Option<f64>, mfu: Option<f64>) -> Record {
    Record::Step(Box::new(StepStats {
        epoch: 1,
        step: 50,
        steps_per_epoch: 100,
        global_step: 50,
        loss: 0.5,
        acc: 0.875,
        lr: 0.1,
        samples_per_sec: 5210.3,
        timing: crate::record::StepTiming { data: 0.001, compute: 0.01, allreduce: 0.002, update: 0.0005 },
        model_flops,
        mfu,
        cuda_syncs: None,
        ..StepStats::default()
    }))
}

pub(crate) fn summary() -> Summary {
    Summary {
        model: crate::model::ModelKind::Lenet,
        devices: vec!["cuda:0".parse().expect("a device")],
        test_acc: Some(0.9812),
        val_acc: None,
        sec_per_epoch: Some(11.5),
        samples_per_sec: 5210.3,
        epochs_done: 1,
        global_steps: 100,
        reason: crate::record::FinishReason::Completed,
        peak_rss_mib: Some(2048.4),
        val_loss: None,
        perplexity: None,
        tokens_per_sec: None,
        bottleneck: None,
        flops_per_sample: None,
        model_flops: None,
        mfu: None,
        peak_flops: None,
        peak_device_mib: Vec::new(),
    }
}

#[test]
fn the_step_line_shows_the_model_flops_only_when_counted() {
    let mut n = started();
    let times = "  step 13.5 ms = data 1.0 + fwd/bwd 10.0 + allreduce 2.0 + update 0.5";
    let head = "epoch 1/10 step   50/100  loss 0.5000  acc 0.875  lr 0.1  5210.3 samples/s";
    assert_eq!(n.line(&window(None, None)).expect("a line").text, format!("{head}{times}"));
    assert_eq!(
        n.line(&window(Some(2.03e14), Some(0.41))).expect("a line").text,
        format!("{head}  MFU 41% (203 TFLOP/s){times}")
    );
    assert_eq!(
        n.line(&window(Some(3.82e10), None)).expect("a line").text,
        format!("{head}  38.2 GFLOP/s{times}"),
        "a device without a known peak: the rate alone"
    );
    let Record::Step(mut counted) = window(None, None) else { panic!("a step record") };
    counted.cuda_syncs = Some(2.0);
    assert_eq!(
        n.line(&Record::Step(counted)).expect("a line").text,
        format!("{head}{times}  CUDA syncs/step 2.0"),
        "DPT_SYNC_DEBUG=1 counts the synchronizing calls"
    );
}

#[test]
fn the_summary_says_the_model_flops_and_the_peak_memory_where_recorded() {
    let head = "test acc: 0.981, 11.5 sec/epoch on [cuda:0]\nspeed: 5210.3 samples/sec";
    let text = |s: Summary| started().line(&Record::Summary(Box::new(s))).expect("a line").text;
    assert_eq!(text(summary()), format!("{head}\npeak host memory: 2048 MiB"), "an older record");
    let measured = Summary {
        model_flops: Some(2.03e14),
        mfu: Some(0.41),
        flops_per_sample: Some(1.3e10),
        peak_flops: crate::flops::PeakFlops::of(
            "NVIDIA H100 80GB HBM3",
            1,
            crate::model::Precision::F32,
            true,
        ),
        peak_device_mib: vec![12_345.4],
        ..summary()
    };
    assert_eq!(
        text(measured.clone()),
        format!(
            "{head}\nmodel FLOPs: 203 TFLOP/s, MFU 41% of the TF32 peak of 1 x H100 SXM (494 TFLOP/s)\n\
             peak host memory: 2048 MiB\npeak GPU memory: 12,345 MiB"
        )
    );
    let unknown_gpu = Summary {
        mfu: None,
        peak_flops: None,
        peak_rss_mib: None,
        model_flops: Some(3.82e10),
        peak_device_mib: vec![12_345.4, 11_980.0],
        ..measured
    };
    assert_eq!(
        text(unknown_gpu),
        format!("{head}\nmodel FLOPs: 38.2 GFLOP/s\npeak GPU memory: 12,345 / 11,980 MiB (per GPU)")
    );
}

#[test]
fn changes_read_as_sentences_with_their_level() {
    let mut n = Narrator::default();
    let l = n.line(&Record::Event(Change::Paused { global_step: 570 })).unwrap();
    assert_eq!((l.level, l.text.as_str(), l.progress), (Level::Info, "paused at step 570", false));
    let l = n
        .line(&Record::Event(Change::SaveFailed {
            path: "/r/model.safetensors".into(),
            message: "No space left on device".into(),
            advice: "free space and press s".into(),
        }))
        .unwrap();
    assert_eq!(l.level, Level::Error);
    assert!(l.text.contains("No space left") && l.text.contains("press s"), "{}", l.text);
}

#[test]
fn the_start_line_says_what_a_replica_holds_and_its_shard() {
    let info = |(optimizer_shards, gradient_shards): (usize, usize)| {
        Record::Start(Box::new(RunInfo {
            memory: Some(crate::record::StateBytes {
                weights: 199_581_696,
                gradients: 199_581_696 / gradient_shards as u64,
                optimizer: 399_163_392 / optimizer_shards as u64,
                optimizer_shards,
                gradient_shards,
                bucket_buffers: if gradient_shards > 1 { 4 * (25 << 20) } else { 0 },
            }),
            snapshot_bytes: Some(3 * (600 << 20)),
            checkpoint_bytes: Some(600 << 20),
            ..RunInfo::default()
        }))
    };
    let line = |r: &Record| Narrator::default().line(r).expect("a start line").text;
    assert!(
        line(&info((1, 1))).contains(
            ", memory per replica: weights 190.3 MiB, gradients 190.3 MiB, optimizer state 380.7 MiB, rewind points 1.8 GiB, checkpoint copy 600.0 MiB"
        ),
        "{}",
        line(&info((1, 1)))
    );
    assert!(line(&info((2, 1))).contains("optimizer state 190.3 MiB (--zero 1: a 1/2 shard), rewind points"));
    let zero_2 = line(&info((2, 2)));
    assert!(
        zero_2
            .contains("gradients 95.2 MiB, optimizer state 190.3 MiB (--zero 2: 1/2 shards of both), bucket buffers up to 100.0 MiB, rewind"),
        "{zero_2}"
    );
}

#[test]
fn the_start_line_says_whether_the_steps_are_graphed_on_gpus_only() {
    let line = |devices: Vec<DeviceId>, graphs: &str| {
        let info = RunInfo { devices, cuda_graphs: graphs.into(), ..RunInfo::default() };
        Narrator::default().line(&Record::Start(Box::new(info))).expect("a start line").text
    };
    let gpu = line(vec![DeviceId::Cuda(0)], "eager: --cuda-graphs off");
    assert!(gpu.contains(", steps eager: --cuda-graphs off"), "{gpu}");
    assert!(line(vec![DeviceId::Cuda(0)], "graphed: each replica").contains(", steps graphed: each replica"));
    let cpu = line(vec![DeviceId::Cpu], "eager: a replica trains on the CPU");
    assert!(!cpu.contains("steps eager"), "a CPU run is not told it is not graphed: {cpu}");
    assert!(line(vec![DeviceId::Cpu], "graphed: x").contains(", steps graphed: x"));
    assert!(!line(vec![DeviceId::Cuda(0)], "").contains(", steps "), "an earlier version's record");
}
