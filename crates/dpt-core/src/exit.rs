//! `dpt-tui`'s exit statuses besides the signals' (`128 + N`) and a preempted run's
//! (`signals::EX_TEMPFAIL`): the numbers the reference's table, the process's end and whoever
//! reads a child's status (the bench, the dashboard's front) share.

/// The run is done, or was stopped from the dashboard.
pub const DONE: u8 = 0;
/// The run failed: training, a worker or rank, or a last save.
pub const FAILED: u8 = 1;
/// Bad input or usage, said before anything is written.
pub const BAD_INPUT: u8 = 2;
