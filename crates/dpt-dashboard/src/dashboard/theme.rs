//! Colour themes: TOML files in `themes/` (built in), or a user's file that sets only some keys
//! and inherits the rest from `dark` (or from the theme its `inherits` key names).

use std::path::Path;
use std::str::FromStr;

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;
use thiserror::Error;

/// The built-in themes, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("dark", include_str!("../../../../themes/dark.toml")),
    ("light", include_str!("../../../../themes/light.toml")),
    ("high-contrast", include_str!("../../../../themes/high-contrast.toml")),
    ("monochrome", include_str!("../../../../themes/monochrome.toml")),
];

/// A theme that cannot be used.
#[derive(Debug, Error)]
pub enum ThemeError {
    #[error("unknown theme '{0}'; use dark, light, high-contrast, monochrome or the path of a .toml file")]
    Unknown(String),
    #[error("cannot read theme {path}")]
    Read {
        path: String,
        #[source]
        cause: std::io::Error,
    },
    #[error("theme {path} is malformed: {message}")]
    Malformed { path: String, message: String },
    #[error("theme {path}: '{value}' for {key} is not a colour; use a name such as 'cyan', an index 0-255 or '#rrggbb'")]
    BadColor { path: String, key: &'static str, value: String },
    #[error("theme {path} inherits from itself through '{name}'")]
    Cycle { path: String, name: String },
}

macro_rules! theme {
    ($($(#[$doc:meta])* $field:ident),* $(,)?) => {
        /// The colours the dashboard draws with.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Theme {
            pub name: String,
            /// Drawing without colour: emphasis by bold and reverse video only.
            pub monochrome: bool,
            $($(#[$doc])* pub $field: Color,)*
        }

        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct ThemeFile {
            inherits: Option<String>,
            $($field: Option<String>,)*
        }

        impl ThemeFile {
            fn apply(self, base: &mut Theme, path: &str) -> Result<(), ThemeError> {
                $(if let Some(value) = self.$field {
                    base.$field = parse_color(&value).ok_or_else(|| ThemeError::BadColor {
                        path: path.to_owned(),
                        key: stringify!($field),
                        value,
                    })?;
                })*
                Ok(())
            }

            fn complete(&self) -> bool {
                true $(&& self.$field.is_some())*
            }
        }

        impl Theme {
            fn blank(name: &str) -> Theme {
                Theme { name: name.to_owned(), monochrome: false, $($field: Color::Reset,)* }
            }

            fn all_reset(&self) -> bool {
                true $(&& self.$field == Color::Reset)*
            }
        }
    };
}

theme!(
    /// Ordinary text.
    text,
    /// Secondary text and labels.
    dim,
    border,
    title,
    accent,
    train_loss,
    train_acc,
    test_acc,
    test_loss,
    lr,
    /// Vertical marks where the lr changed.
    lr_mark,
    /// Vertical marks where training paused.
    pause_mark,
    util,
    memory,
    running,
    paused,
    finished,
    failed,
    warning,
    error,
    highlight_fg,
    highlight_bg,
);

fn parse_color(value: &str) -> Option<Color> {
    let v = value.trim();
    if let Ok(i) = v.parse::<u8>() {
        return Some(Color::Indexed(i));
    }
    Color::from_str(v).ok()
}

fn parse_file(text: &str, path: &str) -> Result<ThemeFile, ThemeError> {
    toml::from_str(text)
        .map_err(|e| ThemeError::Malformed { path: path.to_owned(), message: e.message().to_owned() })
}

fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

fn resolve(name: &str, text: &str, path: &str, depth: usize) -> Result<Theme, ThemeError> {
    let file = parse_file(text, path)?;
    let mut theme = if file.complete() {
        Theme::blank(name)
    } else {
        let parent = file.inherits.clone().unwrap_or_else(|| "dark".to_owned());
        if depth > 8 || parent == name {
            return Err(ThemeError::Cycle { path: path.to_owned(), name: parent });
        }
        let parent_text = builtin(&parent).ok_or_else(|| ThemeError::Unknown(parent.clone()))?;
        let mut t = resolve(&parent, parent_text, &parent, depth + 1)?;
        t.name = name.to_owned();
        t
    };
    file.apply(&mut theme, path)?;
    theme.monochrome = theme.all_reset();
    Ok(theme)
}

impl Theme {
    /// A built-in theme by name, or a TOML file by path (anything with a `/` or ending `.toml`).
    pub fn load(spec: &str) -> Result<Theme, ThemeError> {
        if let Some(text) = builtin(spec) {
            return resolve(spec, text, spec, 0);
        }
        if spec.contains('/') || spec.ends_with(".toml") {
            let text = std::fs::read_to_string(spec)
                .map_err(|cause| ThemeError::Read { path: spec.to_owned(), cause })?;
            let name =
                Path::new(spec).file_stem().map_or(spec.to_owned(), |s| s.to_string_lossy().into_owned());
            return resolve(&name, &text, spec, 0);
        }
        Err(ThemeError::Unknown(spec.to_owned()))
    }

    /// A theme from TOML text (`name` names it in errors).
    pub fn from_toml(name: &str, text: &str) -> Result<Theme, ThemeError> {
        resolve(name, text, name, 0)
    }

    /// The theme for the flags and environment: `--theme` if given, else monochrome when
    /// `NO_COLOR` is set (and not empty), else dark.
    pub fn select(flag: Option<&str>, no_color: Option<&str>) -> Result<Theme, ThemeError> {
        match flag {
            Some(spec) => Theme::load(spec),
            None if no_color.is_some_and(|v| !v.is_empty()) => Theme::load("monochrome"),
            None => Theme::load("dark"),
        }
    }

    pub fn fg(&self, color: Color) -> Style {
        Style::default().fg(color)
    }

    /// Selected or emphasized text: colours, or reverse video in monochrome.
    pub fn highlight(&self) -> Style {
        if self.monochrome {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default().fg(self.highlight_fg).bg(self.highlight_bg)
        }
    }

    pub fn title(&self) -> Style {
        self.fg(self.title).add_modifier(Modifier::BOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_complete_and_distinct() {
        let themes: Vec<Theme> = BUILTIN.iter().map(|(n, _)| Theme::load(n).unwrap()).collect();
        assert!(themes.iter().all(|t| BUILTIN.iter().any(|(n, _)| *n == t.name)));
        assert!(Theme::load("monochrome").unwrap().monochrome);
        assert!(!Theme::load("dark").unwrap().monochrome);
        assert_ne!(Theme::load("dark").unwrap().text, Theme::load("light").unwrap().text);
    }

    #[test]
    fn a_partial_theme_inherits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.toml");
        std::fs::write(&path, "inherits = \"light\"\naccent = \"#102030\"\ntext = \"7\"\n").unwrap();
        let t = Theme::load(path.to_str().unwrap()).unwrap();
        let light = Theme::load("light").unwrap();
        assert_eq!(t.accent, Color::Rgb(0x10, 0x20, 0x30));
        assert_eq!(t.text, Color::Indexed(7));
        assert_eq!(t.border, light.border);
        assert_eq!(t.name, "mine");
        std::fs::write(&path, "title = \"red\"\n").unwrap();
        assert_eq!(Theme::load(path.to_str().unwrap()).unwrap().border, Theme::load("dark").unwrap().border);
    }

    #[test]
    fn malformed_themes_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        let p = path.to_str().unwrap();
        for (text, needle) in [
            ("text = ", "malformed"),
            ("txet = \"red\"", "malformed"),
            ("text = \"reddish\"", "not a colour"),
            ("text = 3", "malformed"),
            ("inherits = \"nope\"", "unknown theme 'nope'"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = Theme::load(p).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        assert!(matches!(Theme::load("solarized"), Err(ThemeError::Unknown(_))));
        assert!(matches!(Theme::load("/no/such/theme.toml"), Err(ThemeError::Read { .. })));
    }

    #[test]
    fn no_color_selects_monochrome_unless_a_theme_is_named() {
        assert!(Theme::select(None, Some("1")).unwrap().monochrome);
        assert!(!Theme::select(None, Some("")).unwrap().monochrome);
        assert!(!Theme::select(Some("light"), Some("1")).unwrap().monochrome);
    }
}
