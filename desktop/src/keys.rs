//! Key names: from what people, xdotool users and computer-use models write to X keysyms.
//!
//! A name is resolved in this order:
//! 1. an X keysym name, exactly (`Return`, `BackSpace`, `Page_Down`, `F5`, `a`, `A`, `space`,
//!    `eacute`, `XF86AudioPlay`, ...);
//! 2. an alias, ignoring case, `_`, `-` and spaces: xdotool and Anthropic names (`ctrl`, `super`,
//!    `alt`, `shift`), OpenAI CUA names (`CTRL`, `ENTER`, `ESC`, `ARROWLEFT`, `SPACE`, `CMD`),
//!    AIO-style lowercase names (`enter`, `esc`, `pagedown`, `left`, `up`), and a few more;
//! 3. an X keysym name ignoring case (`RETURN`, `f5`, `kp_enter`);
//! 4. a single character (`é`, `世`, `+`), typed as its keysym;
//! 5. `U+XXXX` (a Unicode code point) or `0xXXXX` (a raw keysym).
//!
//! A *chord* is names joined by `+` (`ctrl+shift+t`, `ctrl++` for ctrl and plus), pressed in order
//! and released in reverse. In a chord holding Control, Alt, Super, Meta or Hyper, a single
//! upper-case ASCII letter means its key without Shift (`CTRL+C` is copy, as models mean it);
//! write `shift` to get Shift. `meta`, `cmd`, `command`, `win` and `super` all mean Super.

use crate::keysym_names::KEYSYM_NAMES;

/// An X keysym value.
pub type Keysym = u32;

/// Keysyms this crate refers to by value.
pub(crate) mod sym {
    use super::Keysym;
    pub const NO_SYMBOL: Keysym = 0;
    pub const RETURN: Keysym = 0xff0d;
    pub const TAB: Keysym = 0xff09;
    pub const SHIFT_L: Keysym = 0xffe1;
    pub const SHIFT_R: Keysym = 0xffe2;
    pub const CONTROL_L: Keysym = 0xffe3;
    pub const CONTROL_R: Keysym = 0xffe4;
    pub const CAPS_LOCK: Keysym = 0xffe5;
    pub const META_L: Keysym = 0xffe7;
    pub const META_R: Keysym = 0xffe8;
    pub const ALT_L: Keysym = 0xffe9;
    pub const ALT_R: Keysym = 0xffea;
    pub const SUPER_L: Keysym = 0xffeb;
    pub const SUPER_R: Keysym = 0xffec;
    pub const HYPER_L: Keysym = 0xffed;
    pub const HYPER_R: Keysym = 0xffee;
    pub const ISO_LEVEL3_SHIFT: Keysym = 0xfe03;
    pub const PLUS: Keysym = 0x2b;
    /// Keysyms `0x0100_0000 + code point` name Unicode characters (X11 keysym encoding).
    pub const UNICODE_OFFSET: Keysym = 0x0100_0000;
}

/// A key name that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyNameError {
    /// An empty name, or an empty part of a chord such as `ctrl++c`.
    #[error("empty key name in {0:?}")]
    Empty(String),
    /// A name that is neither a keysym, an alias, a character nor a code point.
    #[error("unknown key name {0:?}")]
    Unknown(String),
}

/// Aliases, keyed by the name lower-cased with `_`, `-` and spaces removed.
const ALIASES: &[(&str, Keysym)] = &[
    // Modifiers.
    ("ctrl", sym::CONTROL_L),
    ("control", sym::CONTROL_L),
    ("ctl", sym::CONTROL_L),
    ("lctrl", sym::CONTROL_L),
    ("leftctrl", sym::CONTROL_L),
    ("lcontrol", sym::CONTROL_L),
    ("leftcontrol", sym::CONTROL_L),
    ("rctrl", sym::CONTROL_R),
    ("rightctrl", sym::CONTROL_R),
    ("rcontrol", sym::CONTROL_R),
    ("rightcontrol", sym::CONTROL_R),
    ("shift", sym::SHIFT_L),
    ("lshift", sym::SHIFT_L),
    ("leftshift", sym::SHIFT_L),
    ("rshift", sym::SHIFT_R),
    ("rightshift", sym::SHIFT_R),
    ("alt", sym::ALT_L),
    ("lalt", sym::ALT_L),
    ("leftalt", sym::ALT_L),
    ("option", sym::ALT_L),
    ("opt", sym::ALT_L),
    ("ralt", sym::ALT_R),
    ("rightalt", sym::ALT_R),
    ("altgr", sym::ISO_LEVEL3_SHIFT),
    ("super", sym::SUPER_L),
    ("lsuper", sym::SUPER_L),
    ("leftsuper", sym::SUPER_L),
    ("rsuper", sym::SUPER_R),
    ("rightsuper", sym::SUPER_R),
    ("meta", sym::SUPER_L),
    ("lmeta", sym::SUPER_L),
    ("leftmeta", sym::SUPER_L),
    ("rmeta", sym::SUPER_R),
    ("rightmeta", sym::SUPER_R),
    ("cmd", sym::SUPER_L),
    ("command", sym::SUPER_L),
    ("win", sym::SUPER_L),
    ("windows", sym::SUPER_L),
    ("lwin", sym::SUPER_L),
    ("rwin", sym::SUPER_R),
    ("logo", sym::SUPER_L),
    ("hyper", sym::HYPER_L),
    // Editing and whitespace.
    ("enter", sym::RETURN),
    ("return", sym::RETURN),
    ("ret", sym::RETURN),
    ("esc", 0xff1b),
    ("escape", 0xff1b),
    ("tab", sym::TAB),
    ("space", 0x20),
    ("spacebar", 0x20),
    ("backspace", 0xff08),
    ("bksp", 0xff08),
    ("bs", 0xff08),
    ("delete", 0xffff),
    ("del", 0xffff),
    ("insert", 0xff63),
    ("ins", 0xff63),
    // Navigation.
    ("home", 0xff50),
    ("end", 0xff57),
    ("pageup", 0xff55),
    ("pgup", 0xff55),
    ("prior", 0xff55),
    ("pagedown", 0xff56),
    ("pgdn", 0xff56),
    ("pgdown", 0xff56),
    ("next", 0xff56),
    ("left", 0xff51),
    ("arrowleft", 0xff51),
    ("leftarrow", 0xff51),
    ("up", 0xff52),
    ("arrowup", 0xff52),
    ("uparrow", 0xff52),
    ("right", 0xff53),
    ("arrowright", 0xff53),
    ("rightarrow", 0xff53),
    ("down", 0xff54),
    ("arrowdown", 0xff54),
    ("downarrow", 0xff54),
    // Locks and system keys.
    ("capslock", sym::CAPS_LOCK),
    ("caps", sym::CAPS_LOCK),
    ("numlock", 0xff7f),
    ("scrolllock", 0xff14),
    ("printscreen", 0xff61),
    ("prtsc", 0xff61),
    ("prtscn", 0xff61),
    ("print", 0xff61),
    ("pause", 0xff13),
    ("menu", 0xff67),
    ("contextmenu", 0xff67),
    ("apps", 0xff67),
    // Punctuation spelled out.
    ("plus", sym::PLUS),
    ("minus", 0x2d),
    ("dash", 0x2d),
    ("equal", 0x3d),
    ("equals", 0x3d),
    ("comma", 0x2c),
    ("period", 0x2e),
    ("dot", 0x2e),
    ("slash", 0x2f),
    ("backslash", 0x5c),
    ("semicolon", 0x3b),
    ("quote", 0x27),
    ("apostrophe", 0x27),
    ("backquote", 0x60),
    ("backtick", 0x60),
    ("grave", 0x60),
    // Media keys.
    ("volumeup", 0x1008_ff13),
    ("audiovolumeup", 0x1008_ff13),
    ("volumedown", 0x1008_ff11),
    ("audiovolumedown", 0x1008_ff11),
    ("volumemute", 0x1008_ff12),
    ("mute", 0x1008_ff12),
    ("audiovolumemute", 0x1008_ff12),
    ("mediaplaypause", 0x1008_ff14),
    ("playpause", 0x1008_ff14),
    ("mediastop", 0x1008_ff15),
    ("medianexttrack", 0x1008_ff17),
    ("nexttrack", 0x1008_ff17),
    ("mediaprevioustrack", 0x1008_ff16),
    ("mediaprevtrack", 0x1008_ff16),
    ("prevtrack", 0x1008_ff16),
];

/// Resolves one key name to a keysym (see the module documentation for the rules).
pub fn parse_key(name: &str) -> Result<Keysym, KeyNameError> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        // A lone space is the space key; other blank names are errors.
        if name == " " {
            return Ok(0x20);
        }
        return Err(KeyNameError::Empty(name.to_owned()));
    }
    if let Ok(i) = KEYSYM_NAMES.binary_search_by(|(n, _)| (*n).cmp(trimmed)) {
        // binary_search returned a valid index.
        return Ok(KEYSYM_NAMES[i].1);
    }
    let folded: String = trimmed
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    if let Some((_, ks)) = ALIASES.iter().find(|(alias, _)| *alias == folded) {
        return Ok(*ks);
    }
    if let Some((_, ks)) = KEYSYM_NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(trimmed))
    {
        return Ok(*ks);
    }
    let mut chars = trimmed.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        return char_keysym(c).ok_or_else(|| KeyNameError::Unknown(name.to_owned()));
    }
    if let Some(ks) = parse_numeric(trimmed) {
        return Ok(ks);
    }
    Err(KeyNameError::Unknown(name.to_owned()))
}

/// `U+XXXX` (a Unicode scalar value) or `0xXXXX` (a raw keysym, at most 29 bits as X allows).
fn parse_numeric(name: &str) -> Option<Keysym> {
    if let Some(hex) = name.strip_prefix("U+").or_else(|| name.strip_prefix("u+")) {
        let cp = u32::from_str_radix(hex, 16).ok()?;
        return char_keysym(char::from_u32(cp)?);
    }
    let hex = name
        .strip_prefix("0x")
        .or_else(|| name.strip_prefix("0X"))?;
    let ks = u32::from_str_radix(hex, 16).ok()?;
    (ks != sym::NO_SYMBOL && ks < 0x2000_0000).then_some(ks)
}

/// Parses a chord such as `ctrl+shift+t` into the keysyms to press in order.
pub fn parse_chord(chord: &str) -> Result<Vec<Keysym>, KeyNameError> {
    let trimmed = chord.trim();
    // A trailing "++" is "... plus the plus key"; a lone "+" is the plus key.
    let (body, trailing_plus) = if trimmed == "+" {
        ("", true)
    } else if let Some(body) = trimmed.strip_suffix("++") {
        (body, true)
    } else {
        (trimmed, false)
    };
    let mut keys = Vec::new();
    if !body.is_empty() || !trailing_plus {
        for part in body.split('+') {
            if part.trim().is_empty() {
                return Err(KeyNameError::Empty(chord.to_owned()));
            }
            keys.push(parse_key(part)?);
        }
    }
    if trailing_plus {
        keys.push(sym::PLUS);
    }
    Ok(normalize_chord(keys))
}

/// Parses a list of key names pressed together (OpenAI CUA `keypress`, AIO `HOTKEY`). Each item
/// may itself be a chord.
pub fn parse_hotkey<S: AsRef<str>>(names: &[S]) -> Result<Vec<Keysym>, KeyNameError> {
    if names.is_empty() {
        return Err(KeyNameError::Empty(String::new()));
    }
    let mut keys = Vec::new();
    for name in names {
        keys.extend(parse_chord(name.as_ref())?);
    }
    Ok(normalize_chord(keys))
}

/// Parses whitespace-separated chords pressed one after the other, as `xdotool key` takes them
/// (`ctrl+a BackSpace`).
pub fn parse_sequence(sequence: &str) -> Result<Vec<Vec<Keysym>>, KeyNameError> {
    if sequence == " " {
        return Ok(vec![vec![0x20]]);
    }
    let chords: Vec<Vec<Keysym>> = sequence
        .split_whitespace()
        .map(parse_chord)
        .collect::<Result<_, _>>()?;
    if chords.is_empty() {
        return Err(KeyNameError::Empty(sequence.to_owned()));
    }
    Ok(chords)
}

/// In a chord with a non-Shift modifier, an upper-case ASCII letter becomes its unshifted key.
fn normalize_chord(mut keys: Vec<Keysym>) -> Vec<Keysym> {
    let has_command_modifier = keys.iter().any(|&ks| {
        matches!(
            ks,
            sym::CONTROL_L
                | sym::CONTROL_R
                | sym::ALT_L
                | sym::ALT_R
                | sym::META_L
                | sym::META_R
                | sym::SUPER_L
                | sym::SUPER_R
                | sym::HYPER_L
                | sym::HYPER_R
        )
    });
    if has_command_modifier {
        for ks in &mut keys {
            if (0x41..=0x5a).contains(ks) {
                *ks += 0x20;
            }
        }
    }
    keys
}

/// Whether a keysym is a Shift key (pressing it is how a chord asks for Shift).
pub(crate) fn is_shift(ks: Keysym) -> bool {
    matches!(ks, sym::SHIFT_L | sym::SHIFT_R)
}

/// The keysym that types a character: Latin-1 keysyms equal their code point, other characters
/// use the Unicode keysym range. Newline and tab map to Return and Tab; other control characters
/// have no keysym here.
pub fn char_keysym(c: char) -> Option<Keysym> {
    let cp = u32::from(c);
    match c {
        '\n' | '\r' => Some(sym::RETURN),
        '\t' => Some(sym::TAB),
        _ if c.is_control() => None,
        _ if (0x20..=0x7e).contains(&cp) || (0xa0..=0xff).contains(&cp) => Some(cp),
        _ => Some(sym::UNICODE_OFFSET | cp),
    }
}

/// The character a keysym types, for Latin-1 and Unicode keysyms (legacy keysyms of other
/// scripts are not decoded).
pub fn keysym_char(ks: Keysym) -> Option<char> {
    match ks {
        0x20..=0x7e | 0xa0..=0xff => char::from_u32(ks),
        0x0100_0020..=0x0110_ffff => {
            char::from_u32(ks - sym::UNICODE_OFFSET).filter(|c| !c.is_control())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(name: &str, expected: Keysym) {
        assert_eq!(parse_key(name), Ok(expected), "name {name:?}");
    }

    #[test]
    fn x_keysym_names_resolve_exactly() {
        check("Return", 0xff0d);
        check("BackSpace", 0xff08);
        check("Page_Down", 0xff56);
        check("Prior", 0xff55);
        check("F5", 0xffc2);
        check("F35", 0xffe0);
        check("a", 0x61);
        check("A", 0x41);
        check("space", 0x20);
        check("eacute", 0xe9);
        check("Eacute", 0xc9);
        check("KP_Enter", 0xff8d);
        check("XF86AudioPlay", 0x1008_ff14);
        check("ISO_Level3_Shift", 0xfe03);
        check("Super_L", sym::SUPER_L);
    }

    #[test]
    fn xdotool_and_anthropic_names_resolve() {
        check("ctrl", sym::CONTROL_L);
        check("super", sym::SUPER_L);
        check("alt", sym::ALT_L);
        check("shift", sym::SHIFT_L);
        check("Escape", 0xff1b);
        check("Tab", sym::TAB);
        check("Down", 0xff54);
        check("minus", 0x2d);
        check("plus", 0x2b);
    }

    #[test]
    fn openai_cua_names_resolve_case_insensitively() {
        check("CTRL", sym::CONTROL_L);
        check("ENTER", sym::RETURN);
        check("ESC", 0xff1b);
        check("ARROWLEFT", 0xff51);
        check("ArrowRight", 0xff53);
        check("SPACE", 0x20);
        check("CMD", sym::SUPER_L);
        check("META", sym::SUPER_L);
        check("BACKSPACE", 0xff08);
        check("PAGEDOWN", 0xff56);
        check("F12", 0xffc9);
        check("DELETE", 0xffff);
    }

    #[test]
    fn aio_lowercase_names_resolve() {
        check("enter", sym::RETURN);
        check("esc", 0xff1b);
        check("pagedown", 0xff56);
        check("page_down", 0xff56);
        check("page-up", 0xff55);
        check("left", 0xff51);
        check("up", 0xff52);
        check("f5", 0xffc2);
        check("kp_enter", 0xff8d);
        check("return", sym::RETURN);
        check("backspace", 0xff08);
    }

    #[test]
    fn characters_and_code_points_resolve() {
        check("é", 0xe9);
        check("世", 0x0100_4e16);
        check("+", 0x2b);
        check(" ", 0x20);
        check("U+4E16", 0x0100_4e16);
        check("U+00E9", 0xe9);
        check("0xff0d", 0xff0d);
    }

    #[test]
    fn unknown_and_empty_names_are_errors_naming_the_key() {
        assert_eq!(
            parse_key("Hyperspace"),
            Err(KeyNameError::Unknown("Hyperspace".into()))
        );
        assert_eq!(parse_key(""), Err(KeyNameError::Empty(String::new())));
        assert_eq!(
            parse_chord("ctrl+nosuchkey"),
            Err(KeyNameError::Unknown("nosuchkey".into()))
        );
        assert_eq!(
            parse_chord("ctrl++c"),
            Err(KeyNameError::Empty("ctrl++c".into()))
        );
        assert!(parse_key("0x0").is_err());
        assert!(parse_key("U+D800").is_err());
        let message = parse_key("Hyperspace").map_err(|e| e.to_string());
        assert_eq!(message, Err("unknown key name \"Hyperspace\"".into()));
    }

    #[test]
    fn chords_split_on_plus() {
        assert_eq!(
            parse_chord("ctrl+shift+t"),
            Ok(vec![sym::CONTROL_L, sym::SHIFT_L, 0x74])
        );
        assert_eq!(parse_chord("ctrl++"), Ok(vec![sym::CONTROL_L, sym::PLUS]));
        assert_eq!(parse_chord("+"), Ok(vec![sym::PLUS]));
        assert_eq!(parse_chord("Return"), Ok(vec![sym::RETURN]));
        assert_eq!(parse_chord(" alt + F4 "), Ok(vec![sym::ALT_L, 0xffc1]));
    }

    #[test]
    fn upper_case_letters_with_command_modifiers_mean_the_plain_key() {
        assert_eq!(parse_chord("CTRL+C"), Ok(vec![sym::CONTROL_L, 0x63]));
        assert_eq!(parse_hotkey(&["CTRL", "C"]), Ok(vec![sym::CONTROL_L, 0x63]));
        // Without a command modifier an upper-case letter stays upper case.
        assert_eq!(parse_chord("A"), Ok(vec![0x41]));
        assert_eq!(parse_chord("shift+A"), Ok(vec![sym::SHIFT_L, 0x41]));
    }

    #[test]
    fn hotkey_lists_and_sequences() {
        assert_eq!(
            parse_hotkey(&["ctrl", "shift", "t"]),
            Ok(vec![sym::CONTROL_L, sym::SHIFT_L, 0x74])
        );
        assert!(parse_hotkey::<&str>(&[]).is_err());
        assert_eq!(
            parse_sequence("ctrl+a BackSpace"),
            Ok(vec![vec![sym::CONTROL_L, 0x61], vec![0xff08]])
        );
        assert!(parse_sequence("  ").is_err());
    }

    #[test]
    fn characters_and_keysyms_round_trip() {
        for c in ['a', 'Z', ' ', '~', 'é', 'ÿ', '世', '界', 'Ω', '€'] {
            let ks = char_keysym(c).expect("printable characters have keysyms");
            assert_eq!(keysym_char(ks), Some(c), "char {c:?}");
        }
        assert_eq!(char_keysym('\n'), Some(sym::RETURN));
        assert_eq!(char_keysym('\t'), Some(sym::TAB));
        assert_eq!(char_keysym('\u{7}'), None);
        assert_eq!(keysym_char(sym::RETURN), None);
    }

    #[test]
    fn keysym_table_is_sorted_for_binary_search() {
        assert!(KEYSYM_NAMES.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
