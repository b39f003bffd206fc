//! The sweep board's state and decisions, without a terminal: what it shows of the sweep (the
//! latest [`SweepData`]), the order of its rows, the trial selected (followed by its folder
//! across every re-sort and refresh), a question or prompt open, and what each key asks for.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use dpt_core::best::BestMetric;
use dpt_core::sweep::{mean_std, seed_groups, TrialState};

use super::bindings::{self, Key};

/// A sweep as the board shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepData {
    /// The sweep's folder, as its user named it.
    pub folder: String,
    /// The swept settings' short names, one per axis.
    pub axes: Vec<String>,
    /// The axis of the seed, when one is swept with another.
    pub seed_axis: Option<usize>,
    /// What the trials are compared by.
    /// The figure trials are compared by: their runs' own metric (`--best-metric`, the loss for
    /// runs without classes).
    pub metric: BestMetric,
    pub trials: Vec<TrialRow>,
    /// A sweep process runs it now.
    pub running: bool,
    /// Why its sweep process ended before its trials did (its last error line), when it said.
    pub problem: Option<String>,
}

/// One trial as the board shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRow {
    /// Its folder in the sweep's (`trial-003`).
    pub dir: String,
    pub values: Vec<String>,
    pub state: TrialState,
    /// Why it failed, was pruned or stopped.
    pub reason: Option<String>,
    /// Epochs done, with the current one's fraction, and the epochs it runs.
    pub epoch: f64,
    pub epochs: usize,
    /// The metric at its latest evaluation, and its best.
    pub latest: Option<f64>,
    pub best: Option<f64>,
    /// Seconds left, from its epochs' mean time so far (none before its first epoch ends).
    pub eta: Option<f64>,
    /// The metric at each evaluation, against epochs.
    pub curve: Vec<(f64, f64)>,
    /// Its process serves its dashboard now: it can be opened, stopped or steered.
    pub live: bool,
}

/// Trials that differ by their seed alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Their settings but the seed (`lr=0.1`).
    pub name: String,
    /// The mean ± sample standard deviation of the finished ones' latest figure.
    pub stats: Option<(f64, f64)>,
    pub finished: usize,
    pub of: usize,
}

/// The columns the rows can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Trial,
    /// A swept value (numbers in numeric order).
    Value(usize),
    State,
    Epoch,
    Latest,
    Best,
    Eta,
}

impl Column {
    /// The table's columns, in order: the trial, each swept value, then its figures.
    pub fn all(data: &SweepData) -> Vec<Column> {
        let mut all = vec![Column::Trial];
        all.extend((0..data.axes.len()).map(Column::Value));
        all.extend([Column::State, Column::Epoch, Column::Latest, Column::Best, Column::Eta]);
        all
    }

    pub fn name(self, data: &SweepData) -> String {
        match self {
            Column::Trial => "trial".to_owned(),
            Column::Value(a) => data.axes.get(a).cloned().unwrap_or_default(),
            Column::State => "state".to_owned(),
            Column::Epoch => "epoch".to_owned(),
            Column::Latest => "latest".to_owned(),
            Column::Best => "best".to_owned(),
            Column::Eta => "ETA".to_owned(),
        }
    }
}

/// What a key asks the board's owner to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Open this trial's own dashboard (Esc comes back).
    Open(String),
    /// Stop this trial: it checkpoints and ends, and its place goes to the next trial.
    StopTrial(String),
    /// Stop the sweep: its running trials checkpoint; the same command continues it.
    StopSweep,
    /// Set this running trial's learning rate, as its own dashboard's lr key does.
    SetLr(String, f64),
    /// Close the board; the sweep goes on.
    Quit,
}

/// A question or prompt open over the table.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    /// `y` confirms the action.
    Confirm(Action),
    /// The new lr of a trial, as typed so far.
    Lr {
        dir: String,
        input: String,
        error: Option<String>,
    },
    Help,
}

/// The board: the latest data, its order and selection.
#[derive(Debug, Default)]
pub struct Board {
    data: SweepData,
    sort: Option<Column>,
    descending: bool,
    /// The selected trial's folder.
    selected: Option<String>,
    pub overlay: Option<Overlay>,
    /// The last thing an action said (its outcome or why it could not be done).
    pub note: Option<String>,
    /// Opened with `--read-only`: trials can be opened and watched, not stopped or steered.
    read_only: bool,
}

impl Board {
    /// A board that watches only (`attach --read-only`).
    pub fn read_only() -> Board {
        Board { read_only: true, ..Board::default() }
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn data(&self) -> &SweepData {
        &self.data
    }

    /// Takes the sweep as read now; the selection stays on its trial.
    pub fn update(&mut self, data: SweepData) {
        self.data = data;
        if self.selected.as_ref().is_none_or(|s| !self.data.trials.iter().any(|t| &t.dir == s)) {
            self.selected = self.rows().first().map(|&i| self.data.trials[i].dir.clone());
        }
    }

    /// The column sorted by (none: the trials' own order) and whether descending.
    pub fn sort(&self) -> (Option<Column>, bool) {
        (self.sort, self.descending)
    }

    /// The trials' indices in the order shown.
    pub fn rows(&self) -> Vec<usize> {
        let mut rows: Vec<usize> = (0..self.data.trials.len()).collect();
        let Some(column) = self.sort else { return rows };
        let t = &self.data.trials;
        let number = |v: Option<f64>| v.filter(|v| v.is_finite());
        rows.sort_by(|&a, &b| {
            let (x, y) = (&t[a], &t[b]);
            let order = match column {
                Column::Trial => x.dir.cmp(&y.dir),
                Column::Value(i) => {
                    // Numbers in numeric order, before any value that is not one (in text
                    // order): a total order over any mix.
                    let (p, q) = (x.values.get(i), y.values.get(i));
                    let parse = |v: Option<&String>| v.and_then(|v| v.parse::<f64>().ok());
                    match (parse(p), parse(q)) {
                        (Some(a), Some(b)) => a.total_cmp(&b),
                        (Some(_), None) => std::cmp::Ordering::Less,
                        (None, Some(_)) => std::cmp::Ordering::Greater,
                        (None, None) => p.cmp(&q),
                    }
                }
                Column::State => x.state.label().cmp(y.state.label()),
                Column::Epoch => x.epoch.total_cmp(&y.epoch),
                // Trials without the figure go last, whichever the direction.
                Column::Latest | Column::Best | Column::Eta => {
                    let of = |r: &TrialRow| match column {
                        Column::Latest => number(r.latest),
                        Column::Best => number(r.best),
                        _ => number(r.eta),
                    };
                    return match (of(x), of(y)) {
                        (Some(p), Some(q)) if self.descending => q.total_cmp(&p),
                        (Some(p), Some(q)) => p.total_cmp(&q),
                        (Some(_), None) => std::cmp::Ordering::Less,
                        (None, Some(_)) => std::cmp::Ordering::Greater,
                        (None, None) => x.dir.cmp(&y.dir),
                    };
                }
            };
            if self.descending {
                order.reverse()
            } else {
                order
            }
        });
        rows
    }

    /// The selected trial, if the sweep has one.
    pub fn selected(&self) -> Option<&TrialRow> {
        let dir = self.selected.as_ref()?;
        self.data.trials.iter().find(|t| &t.dir == dir)
    }

    /// The trial with the best figure so far (its best evaluation).
    pub fn best(&self) -> Option<&TrialRow> {
        let best = self.data.metric.best_of(self.data.trials.iter().filter_map(|t| t.best))?;
        self.data.trials.iter().find(|t| t.best == Some(best))
    }

    /// With a seed swept beside another setting: the groups of trials that differ by their seed
    /// alone.
    pub fn groups(&self) -> Vec<Group> {
        let data = &self.data;
        let Some(seed) = data.seed_axis.filter(|_| data.axes.len() >= 2) else { return Vec::new() };
        let values: Vec<Vec<String>> = data.trials.iter().map(|t| t.values.clone()).collect();
        seed_groups(&values, Some(seed))
            .into_iter()
            .map(|members| {
                let first = &data.trials[members[0]];
                let name: Vec<String> = (0..data.axes.len())
                    .filter(|&a| a != seed)
                    .map(|a| format!("{}={}", data.axes[a], first.values[a]))
                    .collect();
                let finished: Vec<f64> = members
                    .iter()
                    .map(|&i| &data.trials[i])
                    .filter(|t| t.state == TrialState::Finished)
                    .filter_map(|t| t.latest)
                    .collect();
                Group {
                    name: name.join(" "),
                    stats: mean_std(&finished),
                    finished: finished.len(),
                    of: members.len(),
                }
            })
            .collect()
    }

    /// What `key` asks for; the board's own changes (selection, sort, prompts) are made here.
    pub fn on_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Some(Action::Quit);
        }
        match self.overlay.take() {
            Some(Overlay::Help) => None,
            Some(Overlay::Confirm(action)) => {
                matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')).then_some(action)
            }
            Some(Overlay::Lr { dir, mut input, .. }) => match key.code {
                KeyCode::Esc => None,
                KeyCode::Enter => match input.trim().parse::<f64>() {
                    Ok(lr) if lr.is_finite() && lr > 0.0 => Some(Action::SetLr(dir, lr)),
                    _ => {
                        let error = Some(format!("{input:?} is not a positive number"));
                        self.overlay = Some(Overlay::Lr { dir, input, error });
                        None
                    }
                },
                KeyCode::Backspace => {
                    input.pop();
                    self.overlay = Some(Overlay::Lr { dir, input, error: None });
                    None
                }
                KeyCode::Char(c) if c.is_ascii_digit() || ".eE-+".contains(c) => {
                    input.push(c);
                    self.overlay = Some(Overlay::Lr { dir, input, error: None });
                    None
                }
                _ => {
                    self.overlay = Some(Overlay::Lr { dir, input, error: None });
                    None
                }
            },
            None => self.on_table_key(key.code),
        }
    }

    fn on_table_key(&mut self, code: KeyCode) -> Option<Action> {
        let binding = bindings::of(code)?;
        if binding.steers && self.read_only {
            self.note = Some("read-only: attach without --read-only to stop or steer".to_owned());
            return None;
        }
        let live = self.selected().filter(|t| t.live).map(|t| t.dir.clone());
        let name = self.selected().map(|t| t.dir.clone());
        match binding.key {
            Key::Close => return Some(Action::Quit),
            Key::Down => self.move_selection(1),
            Key::Up => self.move_selection(-1),
            Key::First => self.move_selection(isize::MIN / 2),
            Key::Last => self.move_selection(isize::MAX / 2),
            Key::Sort => self.next_sort(),
            Key::Reverse => self.descending = !self.descending,
            Key::Help => self.overlay = Some(Overlay::Help),
            Key::Open => match (live, name) {
                (Some(dir), _) => return Some(Action::Open(dir)),
                (None, Some(dir)) => {
                    let folder = &self.data.folder;
                    self.note =
                        Some(format!("{dir} is not running: 'dpt-tui show {folder}/{dir}' opens its record"));
                }
                (None, None) => {}
            },
            Key::StopTrial => match (live, name) {
                (Some(dir), _) => self.overlay = Some(Overlay::Confirm(Action::StopTrial(dir))),
                (None, Some(dir)) => self.note = Some(format!("{dir} is not running")),
                (None, None) => {}
            },
            Key::SetLr => match (live, name) {
                (Some(dir), _) => self.overlay = Some(Overlay::Lr { dir, input: String::new(), error: None }),
                (None, Some(dir)) => self.note = Some(format!("{dir} is not running")),
                (None, None) => {}
            },
            Key::StopSweep if self.data.running => self.overlay = Some(Overlay::Confirm(Action::StopSweep)),
            Key::StopSweep => self.note = Some("no sweep process runs this sweep now".to_owned()),
        }
        None
    }

    /// Moves the selection `by` rows in the order shown, stopping at the ends.
    fn move_selection(&mut self, by: isize) {
        let rows = self.rows();
        if rows.is_empty() {
            return;
        }
        let at = self
            .selected
            .as_ref()
            .and_then(|s| rows.iter().position(|&i| &self.data.trials[i].dir == s))
            .unwrap_or(0);
        let to = at.saturating_add_signed(by).min(rows.len() - 1);
        self.selected = Some(self.data.trials[rows[to]].dir.clone());
    }

    /// Sorts by the next column: none, trial, each swept value, state, epoch, latest, best,
    /// ETA, then none again. The best figures sort best first.
    fn next_sort(&mut self) {
        let mut order = vec![None];
        order.extend(Column::all(&self.data).into_iter().map(Some));
        let at = order.iter().position(|c| *c == self.sort).unwrap_or(0);
        self.sort = order[(at + 1) % order.len()];
        let best_first = matches!(self.sort, Some(Column::Latest | Column::Best));
        self.descending = best_first && self.data.metric == BestMetric::ValAcc;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(
        dir: &str,
        values: [&str; 2],
        state: TrialState,
        best: Option<f64>,
        live: bool,
    ) -> TrialRow {
        TrialRow {
            dir: dir.to_owned(),
            values: values.map(str::to_owned).to_vec(),
            state,
            reason: None,
            epoch: if state == TrialState::Pending { 0.0 } else { 1.5 },
            epochs: 3,
            latest: best.map(|b| b - 0.01),
            best,
            eta: live.then_some(12.0),
            curve: best.map(|b| vec![(1.0, b - 0.1), (2.0, b)]).unwrap_or_default(),
            live,
        }
    }

    pub(crate) fn sweep() -> SweepData {
        SweepData {
            folder: "sweeps/lr".to_owned(),
            axes: vec!["lr".to_owned(), "seed".to_owned()],
            seed_axis: Some(1),
            metric: BestMetric::ValAcc,
            trials: vec![
                row("trial-000", ["0.3", "1"], TrialState::Finished, Some(0.80), false),
                row("trial-001", ["0.3", "2"], TrialState::Finished, Some(0.84), false),
                row("trial-002", ["0.05", "1"], TrialState::Running, Some(0.71), true),
                row("trial-003", ["0.05", "2"], TrialState::Pending, None, false),
            ],
            running: true,
            problem: None,
        }
    }

    fn press(board: &mut Board, code: KeyCode) -> Option<Action> {
        board.on_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn dirs(board: &Board) -> Vec<&str> {
        board.rows().iter().map(|&i| board.data().trials[i].dir.as_str()).collect()
    }

    #[test]
    fn rows_sort_by_each_column_and_the_selection_follows_its_trial() {
        let mut board = Board::default();
        board.update(sweep());
        assert_eq!(board.selected().map(|t| t.dir.as_str()), Some("trial-000"));
        press(&mut board, KeyCode::Down);
        press(&mut board, KeyCode::Down);
        assert_eq!(board.selected().map(|t| t.dir.as_str()), Some("trial-002"));
        press(&mut board, KeyCode::Char('s'));
        assert_eq!(board.sort(), (Some(Column::Trial), false));
        press(&mut board, KeyCode::Char('s'));
        // lr in numeric order (0.05 before 0.3, which text order would also give; 10 would not).
        assert_eq!(board.sort(), (Some(Column::Value(0)), false));
        assert_eq!(dirs(&board), ["trial-002", "trial-003", "trial-000", "trial-001"]);
        for _ in 0..4 {
            press(&mut board, KeyCode::Char('s'));
        }
        // Latest, best first; the trial without a figure last.
        assert_eq!(board.sort(), (Some(Column::Latest), true));
        assert_eq!(dirs(&board), ["trial-001", "trial-000", "trial-002", "trial-003"]);
        press(&mut board, KeyCode::Char('r'));
        assert_eq!(
            dirs(&board),
            ["trial-002", "trial-000", "trial-001", "trial-003"],
            "worst first, none still last"
        );
        // The selection stayed on its trial through the sorts, and moves in the order shown.
        assert_eq!(board.selected().map(|t| t.dir.as_str()), Some("trial-002"));
        press(&mut board, KeyCode::Down);
        assert_eq!(board.selected().map(|t| t.dir.as_str()), Some("trial-000"));
        // A refresh keeps it too.
        let mut later = sweep();
        later.trials[0].best = Some(0.9);
        board.update(later);
        assert_eq!(board.selected().map(|t| t.dir.as_str()), Some("trial-000"));
        assert_eq!(board.best().map(|t| t.dir.as_str()), Some("trial-000"));
    }

    #[test]
    fn numbers_sort_as_numbers_before_other_values() {
        let mut data = sweep();
        data.trials[0].values[0] = "10".to_owned();
        data.trials[1].values[0] = "4bit".to_owned();
        data.trials[2].values[0] = "8".to_owned();
        data.trials[3].values[0] = "16".to_owned();
        let mut board = Board::default();
        board.update(data);
        press(&mut board, KeyCode::Char('s'));
        press(&mut board, KeyCode::Char('s'));
        assert_eq!(dirs(&board), ["trial-002", "trial-000", "trial-003", "trial-001"]);
    }

    #[test]
    fn keys_act_on_a_running_trial_after_asking_and_say_why_not_otherwise() {
        let mut board = Board::default();
        board.update(sweep());
        // trial-000 finished: nothing to open, stop or steer.
        assert_eq!(press(&mut board, KeyCode::Enter), None);
        assert!(board.note.as_deref().is_some_and(|n| n.contains("not running")), "{:?}", board.note);
        assert_eq!(press(&mut board, KeyCode::Char('x')), None);
        assert_eq!(board.overlay, None);
        press(&mut board, KeyCode::Down);
        press(&mut board, KeyCode::Down);
        assert_eq!(press(&mut board, KeyCode::Enter), Some(Action::Open("trial-002".into())));
        // Stopping asks first; anything but y cancels.
        assert_eq!(press(&mut board, KeyCode::Char('x')), None);
        assert_eq!(press(&mut board, KeyCode::Char('n')), None);
        assert_eq!(board.overlay, None);
        press(&mut board, KeyCode::Char('x'));
        assert_eq!(press(&mut board, KeyCode::Char('y')), Some(Action::StopTrial("trial-002".into())));
        press(&mut board, KeyCode::Char('X'));
        assert_eq!(press(&mut board, KeyCode::Char('y')), Some(Action::StopSweep));
        // The lr prompt takes a positive number.
        press(&mut board, KeyCode::Char('l'));
        for c in "-1".chars() {
            press(&mut board, KeyCode::Char(c));
        }
        assert_eq!(press(&mut board, KeyCode::Enter), None);
        assert!(matches!(&board.overlay, Some(Overlay::Lr { error: Some(_), .. })), "{:?}", board.overlay);
        press(&mut board, KeyCode::Backspace);
        press(&mut board, KeyCode::Backspace);
        for c in "2e-3".chars() {
            press(&mut board, KeyCode::Char(c));
        }
        assert_eq!(press(&mut board, KeyCode::Enter), Some(Action::SetLr("trial-002".into(), 2e-3)));
        assert_eq!(press(&mut board, KeyCode::Char('q')), Some(Action::Quit));
        // A sweep no process runs cannot be stopped.
        let mut done = sweep();
        done.running = false;
        board.update(done);
        assert_eq!(press(&mut board, KeyCode::Char('X')), None);
        assert_eq!(board.overlay, None);
        // Read-only: opened and watched, not stopped or steered.
        let mut board = Board::read_only();
        board.update(sweep());
        press(&mut board, KeyCode::Down);
        press(&mut board, KeyCode::Down);
        for key in ['x', 'l', 'X'] {
            assert_eq!(press(&mut board, KeyCode::Char(key)), None);
            assert_eq!(board.overlay, None, "{key}");
            assert!(board.note.as_deref().is_some_and(|n| n.starts_with("read-only")), "{key}");
        }
        assert_eq!(press(&mut board, KeyCode::Enter), Some(Action::Open("trial-002".into())));
    }

    #[test]
    fn trials_of_the_same_settings_group_over_their_seeds() {
        let mut board = Board::default();
        board.update(sweep());
        let groups = board.groups();
        assert_eq!(groups.len(), 2);
        let g = &groups[0];
        assert_eq!((g.name.as_str(), g.finished, g.of), ("lr=0.3", 2, 2));
        let (mean, std) = g.stats.expect("two finished");
        assert!((mean - 0.81).abs() < 1e-12, "{mean}");
        assert!((std - (0.0008f64).sqrt()).abs() < 1e-12, "{std}");
        assert_eq!(
            (groups[1].stats, groups[1].finished, groups[1].of),
            (None, 0, 2),
            "none of lr=0.05 finished"
        );
    }
}
