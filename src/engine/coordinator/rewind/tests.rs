//! The tests of `rewind.rs`.

mod memory_and_positions {
    use super::super::{between, check_point_memory, point_bytes, points_that_fit, skipped};

    #[test]
    fn the_default_points_are_as_many_as_fit_half_the_available_memory() {
        let gib = 1u64 << 30;
        assert_eq!(points_that_fit(3, gib, Some(16 * gib)), 3);
        assert_eq!(points_that_fit(3, gib, Some(5 * gib)), 2, "2 GiB of points in 5 available");
        assert_eq!(points_that_fit(3, 4 * gib, Some(5 * gib)), 0, "none fits half");
        assert_eq!(points_that_fit(3, gib, None), 3, "unknown memory: the default");
    }

    #[test]
    fn the_points_memory_is_counted_and_refused_with_the_numbers() {
        // 1,000 weights with Adam's two slots and an EMA, 10 buffer values with its EMA.
        assert_eq!(point_bytes(1000, 10, 2, true, false), 4 * (1000 * 4 + 10 * 2));
        // From a GPU, page-locked blocks of a power of two: 4,096 and 64 bytes.
        assert_eq!(point_bytes(1000, 10, 2, true, true), 4096 * 4 + 64 * 2);
        assert_eq!(check_point_memory(3, 1 << 20, 1, Some(1 << 30)), Ok(Some(3 << 20)));
        assert_eq!(check_point_memory(0, 1 << 40, 8, Some(1)), Ok(None));
        let e = check_point_memory(3, 1 << 30, 2, Some(4 << 30)).unwrap_err().to_string();
        assert!(
            e.contains("6.00 GiB")
                && e.contains("1.00 GiB each, for 2 processes")
                && e.contains("4.00 GiB is available"),
            "{e}"
        );
        assert!(e.contains("--snapshots 0"), "{e}");
    }

    #[test]
    fn a_skip_moves_over_epoch_ends() {
        assert_eq!(skipped((0, 3), 0, 10), (0, 3));
        assert_eq!(skipped((0, 3), 7, 10), (1, 0));
        assert_eq!(skipped((2, 9), 25, 10), (5, 4));
        assert_eq!(between((0, 3), (1, 0), 10), 7);
        assert_eq!(between((2, 9), (5, 4), 10), 25);
        assert_eq!(between((1, 0), (0, 3), 10), 0, "never negative");
    }
}

mod points_tests {
    use super::super::*;
    use crate::engine::coordinator::persist::PersistSettings;
    use crate::persist::checkpoint::{Checkpoint, CheckpointState};
    use dpt_core::best::{BestKeeper, BestMetric};
    use tch::Tensor;

    fn point(global_step: usize) -> Resume {
        let normalize = crate::model::Normalization::uniform(0.5, 0.5);
        Resume {
            state: CheckpointState { global_step, ..CheckpointState::new(Default::default(), normalize) },
            params: Tensor::ones([2], tch::kind::FLOAT_CPU),
            optimizer: Vec::new(),
            buffers: Tensor::zeros([0], tch::kind::FLOAT_CPU),
            ema: None,
            then: Default::default(),
        }
    }

    fn no_disk() -> Persistence {
        let settings = PersistSettings {
            every: CheckpointEvery::Epochs(1),
            keep: 0,
            model: (crate::model::ModelKind::Lenet, None),
            disk_points: true,
            write_fault: false,
        };
        Persistence::new(None, BestKeeper::new(BestMetric::ValLoss, 0, None), settings)
    }

    #[test]
    fn a_point_is_due_by_its_cadence_once_per_step_and_the_newest_are_kept() {
        let mut p = Points::new(2, CheckpointEvery::Steps(5));
        p.decide(3, (0, 3));
        assert!(!p.due());
        p.decide(5, (0, 5));
        assert!(p.due());
        p.taken(Some(point(5)));
        assert!(!p.due());
        p.decide(5, (0, 5));
        assert!(!p.due(), "the step has its point");
        p.taken(Some(point(10)));
        p.taken(Some(point(15)));
        assert_eq!(p.steps(), [10, 15], "the newest 2");
        p.taken(None);
        assert_eq!(p.steps(), [10, 15], "a point not taken drops none");
    }

    #[test]
    fn a_point_on_its_way_is_kept_and_said_once_arrived_and_weights_not_finite_are_not() {
        let normalize = crate::model::Normalization::uniform(0.5, 0.5);
        let landed = |global_step: usize, finite: bool| {
            let state = CheckpointState { global_step, ..CheckpointState::new(Default::default(), normalize.clone()) };
            let b = crate::model::specs(ModelKind::Lenet, None);
            let named = |specs: &[crate::model::TensorSpec]| {
                specs.iter().map(|s| (s.name.clone(), Tensor::zeros(s.shape.as_slice(), tch::kind::FLOAT_CPU))).collect()
            };
            let momentum = vec![("momentum".to_owned(), named(&b.params))];
            let checkpoint =
                Checkpoint { state, params: named(&b.params), optimizer: momentum, buffers: named(&b.buffers), ema: None };
            InFlight::at_once(checkpoint, finite)
        };
        let said = |global_step| Change::Snapshot { global_step, epoch: 0, step: 0, loss: None, lr: 0.1, unix: 0.0 };
        let model = (ModelKind::Lenet, None);
        let mut p = Points::new(2, CheckpointEvery::Steps(5));
        assert!(p.settle(None, model).is_none(), "nothing on its way");
        p.decide(5, (0, 5));
        p.landing(landed(5, true), said(5));
        assert!(!p.due(), "taken at this boundary");
        assert!(p.steps().is_empty(), "not kept before it has arrived");
        assert!(p.in_flight());
        assert!(matches!(p.settle(None, model), Some(Change::Snapshot { global_step: 5, .. })));
        assert_eq!(p.steps(), [5]);
        assert!(!p.in_flight());
        assert!(p.settle(None, model).is_none(), "said once");
        p.landing(landed(10, false), said(10));
        match p.settle(None, model) {
            Some(Change::Warning { message }) => {
                assert_eq!(message, "no rewind point at step 10: the weights are not finite")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p.steps(), [5], "none kept of weights not finite");
    }

    #[test]
    fn a_rewind_is_refused_with_the_points_there_are_and_goes_back_dropping_the_newer() {
        let disk = no_disk();
        let mut p = Points::new(3, CheckpointEvery::Steps(5));
        let plan = |global_step, lr| Plan { global_step, lr, skip: false };
        let e = p.ask(plan(5, None), &disk).unwrap_err();
        assert!(e.contains("no rewind point is kept yet"), "{e}");
        p.taken(Some(point(5)));
        p.taken(Some(point(10)));
        let e = p.ask(plan(7, None), &disk).unwrap_err();
        assert!(e.ends_with("the points are at steps 5, 10"), "{e}");
        assert!(p.ask(plan(5, Some(-1.0)), &disk).unwrap_err().contains("positive"));
        assert_eq!(p.pending(), None, "nothing refused is pending");
        p.ask(plan(5, Some(0.1)), &disk).unwrap();
        assert_eq!(p.take_pending(), Some(plan(5, Some(0.1))));
        let back = p.back_to(5).expect("kept");
        assert_eq!(back.state.global_step, 5);
        assert_eq!(p.steps(), [5], "the newer point dropped, this one kept");
        assert!(p.back_to(10).is_none(), "gone");
    }
}
