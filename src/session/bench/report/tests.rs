//! The bench report's figures and cells, from constructed sides.

use super::*;

fn figures(samples_per_sec: f64) -> RunFigures {
    RunFigures {
        samples_per_sec,
        ms_per_step: 50.0,
        data_ms: 1.0,
        compute_ms: 45.0,
        allreduce_ms: 0.0,
        update_ms: 4.0,
        peak_mib: Some(2048.0),
        flops_per_sample: Some(1e9),
    }
}

fn case(ours: Side<RunFigures>, theirs: Option<Side<TorchFigures>>) -> CaseResult {
    let plan = super::super::plan::cases(1).into_iter().find(|c| c.name == "resnet18-bf16").expect("a case");
    let mut c = CaseResult::new(&plan, "resnet18".into(), "cuda:0".into(), "bf16".into());
    (c.dpt_tui, c.pytorch) = (ours, theirs);
    c.peak = Some(PeakFlops { flops: 600e12, basis: "bf16 peak of 1 x H100 SXM".into() });
    c.fill_derived_figures();
    c
}

#[test]
fn a_case_with_both_sides_has_its_ratio_and_both_utilisations() {
    let theirs = TorchFigures {
        samples_per_sec: 40_000.0,
        ms_per_step: 6.4,
        peak_mib: Some(3000.0),
        flops_per_sample: Some(0.8e9),
    };
    let c = case(Side::ok(figures(50_000.0)), Some(Side::ok(theirs)));
    assert_eq!(c.ratio, Some(1.25));
    assert_eq!(c.model_flops, Some(150e12));
    assert_eq!(c.mfu, Some(0.25));
    assert_eq!(c.pytorch_mfu, Some(0.2));
    assert_eq!(c.flops_vs_flop_counter, Some(1.25));
    assert!(!c.failed());
    let report = Report {
        machine: Machine {
            dpt_tui: "0.1.0".into(),
            torch: "2.11.0+cu130".into(),
            python_torch: Some("2.11.0+cu130".into()),
            host: "node".into(),
            cpu_cores: 16,
            nvidia_driver: Some("580.65".into()),
            devices: vec!["cuda:0 NVIDIA H100 80GB HBM3".into()],
            date: "2026-11-26".into(),
        },
        budget_s: 300.0,
        elapsed_s: 250.0,
        cases: vec![c],
        interrupted: None,
    };
    let table = report.table();
    let row = table.lines().nth(1).expect("a row");
    assert!(row.starts_with("resnet18-bf16  cuda:0"), "{row}");
    for cell in [
        "50,000 samples/s",
        "50.0 = 1.0 + 45.0 + 0.0 + 4.0",
        "2,048 / 3,000 MiB",
        "25.0% (150 TFLOP/s)",
        "40,000 samples/s",
        "1.25x",
    ] {
        assert!(row.contains(cell), "{cell} in {row}");
    }
    let md = report.markdown();
    assert!(md.contains("| resnet18-bf16 | cuda:0 | bf16 | 256 | 50,000 samples/s |"), "{md}");
    assert!(md.contains("NVIDIA driver 580.65"));
    assert!(!md.contains("interrupted"), "{md}");
    // A stopped bench says so under the table, in both outputs.
    let stopped = Report { interrupted: Some("SIGINT".into()), ..report };
    let said = "interrupted by SIGINT after 1 case(s); the others did not run";
    assert!(stopped.table().contains(said) && stopped.markdown().contains(said));
}

#[test]
fn a_side_that_did_not_run_says_why_and_a_failure_counts() {
    let c = case(
        Side::unmeasured(Status::TimedOut, "killed after 40 s"),
        Some(Side::unmeasured(Status::Failed, "CUDA out of memory")),
    );
    assert!(c.failed());
    assert_eq!(c.ratio, None);
    let cells = c.cells();
    assert_eq!((cells[4].as_str(), cells[8].as_str()), ("timed out", "failed"));
    assert_eq!(
        c.notes(),
        [
            "resnet18-bf16 dpt-tui timed out: killed after 40 s",
            "resnet18-bf16 PyTorch failed: CUDA out of memory"
        ]
    );
    let unsupported = case(Side::unmeasured(Status::Unsupported, "needs a GPU"), None);
    assert!(!unsupported.failed(), "not a failure");
}

#[test]
fn a_gpts_torchscript_loop_has_its_own_ratio_cells_and_notes() {
    let torch = |samples_per_sec: f64| TorchFigures {
        samples_per_sec,
        ms_per_step: 10.0,
        peak_mib: None,
        flops_per_sample: None,
    };
    let mut c = case(Side::ok(figures(100.0)), Some(Side::ok(torch(80.0))));
    c.pytorch_script = Some(Side::ok(torch(125.0)));
    c.fill_derived_figures();
    assert_eq!((c.ratio, c.script_ratio), (Some(1.25), Some(0.8)));
    let cells = c.cells();
    assert_eq!((cells[10].as_str(), cells[11].as_str()), ("125 samples/s", "0.80x"));
    assert!(!c.failed());
    // Its failure is the case's, and its note names it.
    c.pytorch_script = Some(Side::unmeasured(Status::Failed, "no such file"));
    c.fill_derived_figures();
    assert_eq!(c.script_ratio, None);
    assert!(c.failed());
    assert_eq!(c.notes(), ["resnet18-bf16 PyTorch (TorchScript) failed: no such file"]);
    // Other cases have no such reference: dashes.
    let plain = case(Side::ok(figures(100.0)), Some(Side::ok(torch(80.0))));
    assert_eq!((plain.cells()[10].as_str(), plain.cells()[11].as_str()), ("-", "-"));
}
