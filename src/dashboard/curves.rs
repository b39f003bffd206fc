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
    Lr,
}

impl CurveView {
    pub fn next(self) -> Self {
        match self {
            CurveView::Loss => CurveView::Accuracy,
            CurveView::Accuracy => CurveView::D2l,
            CurveView::D2l => CurveView::Lr,
            CurveView::Lr => CurveView::Loss,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            CurveView::Loss => "loss",
            CurveView::Accuracy => "accuracy",
            CurveView::D2l => "d2l view",
            CurveView::Lr => "learning rate",
        }
    }
}
