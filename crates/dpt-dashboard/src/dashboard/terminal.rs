//! Entering and leaving the full-screen terminal, and the guarantee that it is restored: on quit,
//! on error (a guard's `Drop`) and on a panic of the UI thread (the panic hook).

use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::cursor::Show;
use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste};
use crossterm::execute;
use crossterm::terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static PANICKED: AtomicBool = AtomicBool::new(false);

/// For the panic hook: restores the terminal so the message is readable, and tells the
/// dashboard loop to stop drawing.
pub fn on_panic() {
    PANICKED.store(true, Ordering::SeqCst);
    restore();
}

/// Whether a thread (other than a worker, whose panics are caught and reported) panicked.
pub fn panicked() -> bool {
    PANICKED.load(Ordering::SeqCst)
}

/// Leaves raw mode and the alternate screen, shows the cursor; harmless when not active.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(io::stdout(), DisableBracketedPaste, LeaveAlternateScreen, Show);
    }
}

/// The full-screen terminal; restored when dropped.
pub struct Tui {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Tui {
    pub fn enter() -> io::Result<Tui> {
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let result = execute!(io::stdout(), EnterAlternateScreen, EnableBracketedPaste)
            .and_then(|()| Terminal::new(CrosstermBackend::new(io::stdout())));
        match result {
            Ok(mut terminal) => {
                // No `terminal.clear()`: it asks the terminal for the cursor position, which not
                // every terminal answers; the alternate screen starts blank anyway.
                terminal.hide_cursor()?;
                Ok(Tui { terminal })
            }
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        restore();
    }
}
