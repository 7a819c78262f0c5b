//! The pointer: moving, clicking (with modifiers), pressing and releasing buttons, scrolling and
//! dragging, all injected with XTEST. Coordinates are screen pixels, checked against the current
//! screen size.

use std::time::Duration;

use x11rb::protocol::xproto::ConnectionExt as _;

use crate::Desktop;
use crate::error::{DesktopError, StepExt};
use crate::keyboard::KeySession;
use crate::keys;

/// The most wheel notches one [`Desktop::scroll`] call sends on one axis.
pub const MAX_SCROLL_NOTCHES: i32 = 1000;

/// The pause between the clicks of a double or triple click. The X server stamps events with
/// millisecond times, and toolkits (Chromium among them) do not count two presses with the same
/// time stamp as one double click; 20 ms is far inside every double-click interval.
pub const MULTI_CLICK_GAP: Duration = Duration::from_millis(20);

/// A mouse button.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Button {
    Left,
    Middle,
    Right,
    /// The "back" side button (X button 8).
    Back,
    /// The "forward" side button (X button 9).
    Forward,
}

impl Button {
    /// The X button number.
    pub fn code(self) -> u8 {
        match self {
            Button::Left => 1,
            Button::Middle => 2,
            Button::Right => 3,
            Button::Back => 8,
            Button::Forward => 9,
        }
    }

    /// Parses `left`, `middle` (or `wheel`), `right`, `back` and `forward`, ignoring case.
    pub fn from_name(name: &str) -> Option<Button> {
        match name.trim().to_ascii_lowercase().as_str() {
            "left" => Some(Button::Left),
            "middle" | "wheel" => Some(Button::Middle),
            "right" => Some(Button::Right),
            "back" => Some(Button::Back),
            "forward" => Some(Button::Forward),
            _ => None,
        }
    }
}

/// X buttons 4 to 7 are the wheel: up, down, left, right.
const WHEEL_UP: u8 = 4;
const WHEEL_DOWN: u8 = 5;
const WHEEL_LEFT: u8 = 6;
const WHEEL_RIGHT: u8 = 7;

/// Longest wait for the server to move the pointer during a paced drag.
const POINTER_WAIT: Duration = Duration::from_millis(500);

/// The longest segment a straight drag is cut into, in pixels.
const STRAIGHT_DRAG_SEGMENT: f64 = 20.0;
/// The most segments a straight drag is cut into.
const STRAIGHT_DRAG_MAX_SEGMENTS: usize = 50;

/// The points of a straight drag from `start` to `end`: at most [`STRAIGHT_DRAG_SEGMENT`]
/// pixels apart (and at most [`STRAIGHT_DRAG_MAX_SEGMENTS`] segments), both ends included, so
/// applications see the pointer travel rather than jump.
fn straight_path(start: (i32, i32), end: (i32, i32)) -> Vec<(i32, i32)> {
    let (dx, dy) = (
        f64::from(end.0) - f64::from(start.0),
        f64::from(end.1) - f64::from(start.1),
    );
    let steps = ((dx.hypot(dy) / STRAIGHT_DRAG_SEGMENT).ceil() as usize)
        .clamp(1, STRAIGHT_DRAG_MAX_SEGMENTS);
    (0..=steps)
        .map(|i| {
            let t = i as f64 / steps as f64;
            (
                (f64::from(start.0) + dx * t).round() as i32,
                (f64::from(start.1) + dy * t).round() as i32,
            )
        })
        .collect()
}

/// Fails with the axis and value when a point is off the screen.
fn check_point(x: i64, y: i64, (width, height): (u32, u32)) -> Result<(), DesktopError> {
    for (axis, value, limit) in [("x", x, width), ("y", y, height)] {
        if value < 0 || value >= i64::from(limit) {
            return Err(DesktopError::OutOfRange { axis, value, limit });
        }
    }
    Ok(())
}

impl Desktop {
    /// Moves the pointer to a point of the screen.
    pub fn move_to(&self, x: i32, y: i32) -> Result<(), DesktopError> {
        const STEP: &str = "moving the pointer";
        check_point(x.into(), y.into(), self.screen_size()?)?;
        let _input = self.input_state();
        self.fake_motion(x, y, STEP)?;
        self.sync(STEP)
    }

    /// Moves the pointer by an offset from where it is; returns where it ends up.
    pub fn move_rel(&self, dx: i32, dy: i32) -> Result<(i32, i32), DesktopError> {
        const STEP: &str = "moving the pointer by an offset";
        let _input = self.input_state();
        let (x, y) = self.cursor_position()?;
        let (tx, ty) = (i64::from(x) + i64::from(dx), i64::from(y) + i64::from(dy));
        check_point(tx, ty, self.screen_size()?)?;
        // check_point bounded both to the screen, which is at most 32767 pixels wide and high.
        let (tx, ty) = (
            i32::try_from(tx).unwrap_or(i32::MAX),
            i32::try_from(ty).unwrap_or(i32::MAX),
        );
        self.fake_motion(tx, ty, STEP)?;
        self.sync(STEP)?;
        Ok((tx, ty))
    }

    /// Waits until the server reports the pointer at `point` (it has processed the motion that
    /// put it there; a frozen pointer does not move) or `ceiling` passes. Returns early either
    /// way: past the ceiling the drag goes on, as a client with a slow window manager would.
    fn wait_pointer_at(&self, point: (i32, i32), ceiling: Duration) -> Result<(), DesktopError> {
        let started = std::time::Instant::now();
        loop {
            if self.cursor_position()? == point || started.elapsed() >= ceiling {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Where the pointer is, in screen pixels.
    pub fn cursor_position(&self) -> Result<(i32, i32), DesktopError> {
        const STEP: &str = "reading the pointer position";
        let pointer = self
            .conn
            .query_pointer(self.root)
            .step(STEP)?
            .reply()
            .step(STEP)?;
        Ok((pointer.root_x.into(), pointer.root_y.into()))
    }

    /// Presses a button where the pointer is, and keeps it down until [`Desktop::button_up`].
    pub fn button_down(&self, button: Button) -> Result<(), DesktopError> {
        const STEP: &str = "pressing a mouse button";
        let mut input = self.input_state();
        self.fake_button(button.code(), true, STEP)?;
        input.held_buttons.push(button.code());
        self.sync(STEP)
    }

    /// Releases a button.
    pub fn button_up(&self, button: Button) -> Result<(), DesktopError> {
        const STEP: &str = "releasing a mouse button";
        let mut input = self.input_state();
        self.fake_button(button.code(), false, STEP)?;
        input.held_buttons.retain(|&b| b != button.code());
        self.sync(STEP)
    }

    /// Clicks where the pointer is: `count` 1, 2 or 3 for a single, double or triple click,
    /// with modifier keys (`"ctrl"`, `"shift"`, `"alt"`, `"super"`, or any key name) held
    /// around the clicks.
    pub fn click(
        &self,
        button: Button,
        count: u32,
        modifiers: &[&str],
    ) -> Result<(), DesktopError> {
        const STEP: &str = "clicking";
        if !(1..=3).contains(&count) {
            return Err(DesktopError::ClickCount(count));
        }
        let clicks = |desktop: &Desktop| -> Result<(), DesktopError> {
            for n in 0..count {
                if n > 0 {
                    desktop.sync(STEP)?;
                    std::thread::sleep(MULTI_CLICK_GAP);
                }
                desktop.fake_button(button.code(), true, STEP)?;
                desktop.fake_button(button.code(), false, STEP)?;
            }
            Ok(())
        };
        if modifiers.is_empty() {
            let _input = self.input_state();
            clicks(self)?;
            return self.sync(STEP);
        }
        let chord = keys::parse_hotkey(modifiers)?;
        let mut session = KeySession::begin(self, STEP)?;
        let pressed = session.press_chord(&chord)?;
        clicks(self)?;
        session.release_chord(pressed)?;
        session.finish()
    }

    /// Scrolls where the pointer is, in wheel notches: one notch is one press and release of
    /// the wheel button (X buttons 4/5 vertically, 6/7 horizontally), which applications turn
    /// into their own distance (Chromium: about 53 pixels at 100% zoom, or three lines).
    /// Positive `dy` scrolls down, negative up; positive `dx` scrolls right, negative left.
    pub fn scroll(&self, dx: i32, dy: i32) -> Result<(), DesktopError> {
        const STEP: &str = "scrolling";
        for amount in [dx, dy] {
            if amount.unsigned_abs() > MAX_SCROLL_NOTCHES.unsigned_abs() {
                return Err(DesktopError::ScrollTooLong(amount));
            }
        }
        let _input = self.input_state();
        let vertical = if dy < 0 { WHEEL_UP } else { WHEEL_DOWN };
        let horizontal = if dx < 0 { WHEEL_LEFT } else { WHEEL_RIGHT };
        for (button, notches) in [
            (vertical, dy.unsigned_abs()),
            (horizontal, dx.unsigned_abs()),
        ] {
            for _ in 0..notches {
                self.fake_button(button, true, STEP)?;
                self.fake_button(button, false, STEP)?;
            }
        }
        self.sync(STEP)
    }

    /// Drags along a path: moves to the first point, presses the button once, moves through
    /// every following point, and releases once at the last point.
    ///
    /// With a non-zero `step`, the server is synchronised and the call pauses that long after
    /// the press and after each point, as a hand would: toolkits coalesce motion events that
    /// arrive together (Chromium delivers one per frame, GTK merges queued motion), and a paint
    /// program that only sees some points draws straight lines across the corners it missed.
    pub fn drag(
        &self,
        path: &[(i32, i32)],
        button: Button,
        step: Duration,
    ) -> Result<(), DesktopError> {
        const STEP: &str = "dragging";
        if path.len() < 2 {
            return Err(DesktopError::DragPathTooShort(path.len()));
        }
        let screen = self.screen_size()?;
        for &(x, y) in path {
            check_point(x.into(), y.into(), screen)?;
        }
        let _input = self.input_state();
        let mut points = path.iter();
        if let Some(&(x, y)) = points.next() {
            self.fake_motion(x, y, STEP)?;
        }
        self.fake_button(button.code(), true, STEP)?;
        // With a step, each point is held until the server has moved the pointer there, then
        // for `step`. Waiting for the pointer matters after the press: a window manager's
        // passive grab (openbox focuses on click) freezes the pointer until it replays the
        // press, and motions queued meanwhile reach the client in one burst, which toolkits
        // (Chromium's X11 event source) coalesce into one move: the drag would cut corners.
        let pause = |desktop: &Desktop, at: Option<(i32, i32)>| -> Result<(), DesktopError> {
            if !step.is_zero() {
                match at {
                    Some(point) => desktop.wait_pointer_at(point, POINTER_WAIT)?,
                    None => desktop.sync(STEP)?,
                }
                std::thread::sleep(step);
            }
            Ok(())
        };
        let moved = pause(self, None).and_then(|()| {
            points.try_for_each(|&(x, y)| {
                self.fake_motion(x, y, STEP)?;
                pause(self, Some((x, y)))
            })
        });
        // Release even if a motion failed, so the button is not left down.
        let released = self.fake_button(button.code(), false, STEP);
        moved.and(released)?;
        self.sync(STEP)
    }

    /// Drags in a straight line from where the pointer is to `end`, through points at most
    /// 20 pixels apart, pausing `step` at each (see [`Desktop::drag`]).
    pub fn drag_to(
        &self,
        end: (i32, i32),
        button: Button,
        step: Duration,
    ) -> Result<(), DesktopError> {
        let start = self.cursor_position()?;
        self.drag(&straight_path(start, end), button, step)
    }

    /// Drags in a straight line from where the pointer is, by `(dx, dy)` (see
    /// [`Desktop::drag_to`]).
    pub fn drag_by(
        &self,
        (dx, dy): (i32, i32),
        button: Button,
        step: Duration,
    ) -> Result<(), DesktopError> {
        let start = self.cursor_position()?;
        let end = (start.0.saturating_add(dx), start.1.saturating_add(dy));
        self.drag(&straight_path(start, end), button, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_outside_the_screen_name_the_axis() {
        assert!(check_point(0, 0, (10, 10)).is_ok());
        assert!(check_point(9, 9, (10, 10)).is_ok());
        let message = |x, y| check_point(x, y, (10, 20)).map_err(|e| e.to_string());
        assert_eq!(
            message(10, 0),
            Err("x coordinate 10 is outside the screen (valid: 0..10)".into())
        );
        assert_eq!(
            message(0, -1),
            Err("y coordinate -1 is outside the screen (valid: 0..20)".into())
        );
    }

    #[test]
    fn straight_drags_are_cut_into_short_segments() {
        // A drag that does not move is still a press at one point and a release there.
        assert_eq!(straight_path((5, 5), (5, 5)), [(5, 5), (5, 5)]);
        let path = straight_path((0, 0), (100, 0));
        assert_eq!(path.len(), 6, "{path:?}");
        assert_eq!(path.first(), Some(&(0, 0)));
        assert_eq!(path.last(), Some(&(100, 0)));
        assert!(path.windows(2).all(|w| (w[1].0 - w[0].0).abs() <= 20));
        // A long drag is cut into at most 50 segments, ending where it was asked to.
        let path = straight_path((0, 0), (-3000, 4000));
        assert_eq!(path.len(), 51);
        assert_eq!(path.last(), Some(&(-3000, 4000)));
        // Extreme coordinates do not overflow.
        let path = straight_path((i32::MIN, 0), (i32::MAX, 0));
        assert_eq!(path.last(), Some(&(i32::MAX, 0)));
    }

    #[test]
    fn button_names() {
        assert_eq!(Button::from_name("LEFT"), Some(Button::Left));
        assert_eq!(Button::from_name("wheel"), Some(Button::Middle));
        assert_eq!(Button::from_name("thumb"), None);
        assert_eq!(Button::Back.code(), 8);
    }
}
