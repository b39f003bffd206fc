//! Which curves the panel shows. The curves themselves are the record's fold
//! (`crate::record::curves`).

use serde::{Deserialize, Serialize};

/// Which quantity the curve panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CurveView {
    Loss,
    Accuracy,
    Lr,
}

impl CurveView {
    pub fn next(self) -> Self {
        match self {
            CurveView::Loss => CurveView::Accuracy,
            CurveView::Accuracy => CurveView::Lr,
            CurveView::Lr => CurveView::Loss,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            CurveView::Loss => "loss",
            CurveView::Accuracy => "accuracy",
            CurveView::Lr => "learning rate",
        }
    }
}
