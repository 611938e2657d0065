//! The in-process controllers' log during a scene, kept in memory and printed when the
//! scene's test fails: a controller test that times out on a loaded CI machine is otherwise
//! known only by its timeout. `SCENE_LOG` (an env filter) also prints it as it happens.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Mutex, Once};

/// Enough for the last decisions and launches of one scene, without the whole run.
const KEPT: usize = 400;
/// What a failed test prints: a CI log shows its tail.
const PRINTED: usize = 60;
const DEFAULT_FILTER: &str = "info,kube_runtime=warn,aws_config=warn";

static LINES: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
static FAILURE: Mutex<Option<String>> = Mutex::new(None);
static INSTALL: Once = Once::new();

/// Starts a scene's log: installs the subscriber and the panic hook once per test binary (the
/// scenes take turns, so the buffer is one scene's), and forgets the previous scene's lines.
pub fn start() {
    INSTALL.call_once(|| {
        let echo = std::env::var("SCENE_LOG").ok();
        let filter = echo.clone().unwrap_or_else(|| DEFAULT_FILTER.into());
        let echo = echo.is_some();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || Line { echo })
            .try_init();
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            *lock(&FAILURE) = Some(info.to_string());
            default_hook(info);
        }));
    });
    lock(&LINES).clear();
    *lock(&FAILURE) = None;
}

/// Prints the scene's last log lines, then the failure again, so a log's tail shows both.
pub fn print_on_failure() {
    if !std::thread::panicking() {
        return;
    }
    let lines = lock(&LINES);
    let skipped = lines.len().saturating_sub(PRINTED);
    eprintln!(
        "---- the controllers' last {} log lines ----",
        lines.len() - skipped
    );
    for line in lines.iter().skip(skipped) {
        eprintln!("{line}");
    }
    if let Some(failure) = lock(&FAILURE).as_ref() {
        eprintln!("---- the failure (as above) ----\n{failure}");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One formatted event, kept (and echoed when `SCENE_LOG` asks for it).
struct Line {
    echo: bool,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.echo {
            std::io::stdout().write_all(buf)?;
        }
        let text = String::from_utf8_lossy(buf);
        let mut lines = lock(&LINES);
        for line in text.lines().filter(|l| !l.is_empty()) {
            if lines.len() == KEPT {
                lines.pop_front();
            }
            lines.push_back(line.to_string());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
