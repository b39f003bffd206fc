//! Which curves the panel shows. The curves themselves are the record's fold
//! (`crate::record::curves`).

use serde::{Deserialize, Serialize};

/// Which quantity the curve panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CurveView {
    Loss,
    Accuracy,
    /// d2l's Animator: train loss, train accuracy and test accuracy on one plot.
    D2l,
    /// The lr as trained, over the schedule's plan.
    Lr,
    /// The mean gradient's global norm (what rises before a divergence).
    GradNorm,
    /// A script run's named figures, one at a time (`n` shows the next).
    Scalars,
}

impl CurveView {
    pub fn next(self) -> Self {
        match self {
            CurveView::Loss => CurveView::Accuracy,
            CurveView::Accuracy => CurveView::D2l,
            CurveView::D2l => CurveView::Lr,
            CurveView::Lr => CurveView::GradNorm,
            CurveView::GradNorm => CurveView::Scalars,
            CurveView::Scalars => CurveView::Loss,
        }
    }

    /// The view after this one for a run that has named figures or not (the scalars view only
    /// where it has some).
    pub fn next_for(self, has_scalars: bool) -> Self {
        match self.next() {
            CurveView::Scalars if !has_scalars => CurveView::Loss,
            next => next,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            CurveView::Loss => "loss",
            CurveView::Accuracy => "accuracy",
            CurveView::D2l => "d2l view",
            CurveView::Lr => "learning rate",
            CurveView::GradNorm => "gradient norm",
            CurveView::Scalars => "scalars",
        }
    }
}
