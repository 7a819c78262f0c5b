//! Pointer input against a real Xvfb, checked by the events a test window receives.

use crate::common;

use std::time::Duration;

use anyhow::Result;
use common::{HEIGHT, WIDTH, Xvfb};
use desktop::{Button, Desktop, DesktopError};
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{ConnectionExt as _, EventMask, KeyButMask};
use x11rb::rust_connection::RustConnection;

const TIMEOUT: Duration = Duration::from_secs(3);
/// How long to keep reading after the expected events, to catch unexpected extra ones.
const SETTLE: Duration = Duration::from_millis(150);

/// A window at (200, 100), 600x400, listening for buttons and motion.
fn setup() -> Result<(Xvfb, RustConnection, Desktop)> {
    let xvfb = Xvfb::start()?;
    let client = xvfb.client()?;
    let events = EventMask::BUTTON_PRESS | EventMask::BUTTON_RELEASE | EventMask::POINTER_MOTION;
    common::window(&client, (200, 100, 600, 400), 0x3366aa, events)?;
    let desktop = Desktop::connect(&xvfb.display)?;
    Ok((xvfb, client, desktop))
}

fn is_button(event: &Event) -> bool {
    matches!(event, Event::ButtonPress(_) | Event::ButtonRelease(_))
}

/// Button events until `presses` presses and as many releases arrived (and nothing more).
fn buttons(client: &RustConnection, presses: usize) -> Result<Vec<Event>> {
    common::collect(client, TIMEOUT, SETTLE, is_button, |events| {
        events.len() >= presses * 2
    })
}

#[test]
fn move_to_puts_the_pointer_there() -> Result<()> {
    let (_xvfb, client, desktop) = setup()?;
    desktop.move_to(321, 123)?;
    let pointer = client.query_pointer(common::root(&client))?.reply()?;
    assert_eq!((pointer.root_x, pointer.root_y), (321, 123));
    assert_eq!(desktop.cursor_position()?, (321, 123));

    assert_eq!(desktop.move_rel(10, -3)?, (331, 120));
    let pointer = client.query_pointer(common::root(&client))?.reply()?;
    assert_eq!((pointer.root_x, pointer.root_y), (331, 120));

    desktop.move_to(WIDTH as i32 - 1, HEIGHT as i32 - 1)?;
    assert_eq!(desktop.cursor_position()?, (1279, 799));
    Ok(())
}

#[test]
fn coordinates_outside_the_screen_are_refused() -> Result<()> {
    let (_xvfb, _client, desktop) = setup()?;
    desktop.move_to(10, 10)?;
    let refused = |result: Result<(), DesktopError>, axis: &str, value: i64| match result {
        Err(DesktopError::OutOfRange {
            axis: a, value: v, ..
        }) => a == axis && v == value,
        _ => false,
    };
    assert!(refused(desktop.move_to(1280, 0), "x", 1280));
    assert!(refused(desktop.move_to(0, -1), "y", -1));
    assert!(refused(desktop.move_rel(0, 800).map(|_| ()), "y", 810));
    assert!(refused(
        desktop.drag(&[(5, 5), (5, 900)], Button::Left, Duration::ZERO),
        "y",
        900
    ));
    let message = desktop.move_to(2000, 5).map_err(|e| e.to_string());
    assert_eq!(
        message,
        Err("x coordinate 2000 is outside the screen (valid: 0..1280)".into())
    );
    assert_eq!(desktop.cursor_position()?, (10, 10), "nothing moved");
    Ok(())
}

#[test]
fn clicks_arrive_with_the_right_button_position_and_count() -> Result<()> {
    let (_xvfb, client, desktop) = setup()?;
    desktop.move_to(250, 160)?;
    common::drain(&client)?;
    for (button, code, count) in [
        (Button::Left, 1, 1),
        (Button::Right, 3, 2),
        (Button::Middle, 2, 3),
    ] {
        desktop.click(button, count, &[])?;
        let events = buttons(&client, count as usize)?;
        assert_eq!(events.len(), count as usize * 2, "{events:?}");
        for pair in events.chunks(2) {
            let (Event::ButtonPress(press), Event::ButtonRelease(release)) = (&pair[0], &pair[1])
            else {
                panic!("expected press then release, got {pair:?}");
            };
            assert_eq!((press.detail, release.detail), (code, code));
            // Window-relative: the window is at (200, 100).
            assert_eq!((press.event_x, press.event_y), (50, 60));
            assert_eq!((press.root_x, press.root_y), (250, 160));
            assert_eq!(u16::from(press.state) & 0xff, 0, "no modifiers");
        }
    }
    assert!(matches!(
        desktop.click(Button::Left, 4, &[]),
        Err(DesktopError::ClickCount(4))
    ));
    Ok(())
}

#[test]
fn modifiers_held_during_a_click_show_in_the_event_state() -> Result<()> {
    let (_xvfb, client, desktop) = setup()?;
    desktop.move_to(300, 300)?;
    common::drain(&client)?;
    desktop.click(Button::Left, 1, &["ctrl", "shift"])?;
    let events = buttons(&client, 1)?;
    let Event::ButtonPress(press) = &events[0] else {
        panic!("expected a press, got {events:?}");
    };
    let state = press.state;
    assert!(state.contains(KeyButMask::CONTROL), "{state:?}");
    assert!(state.contains(KeyButMask::SHIFT), "{state:?}");
    assert!(!state.contains(KeyButMask::MOD1), "{state:?}");

    desktop.click(Button::Left, 1, &["alt"])?;
    let events = buttons(&client, 1)?;
    let Event::ButtonPress(press) = &events[0] else {
        panic!("expected a press, got {events:?}");
    };
    assert!(press.state.contains(KeyButMask::MOD1), "{:?}", press.state);
    assert!(
        !press.state.contains(KeyButMask::CONTROL),
        "{:?}",
        press.state
    );

    // The modifiers were released: a plain click has none.
    desktop.click(Button::Left, 1, &[])?;
    let events = buttons(&client, 1)?;
    let Event::ButtonPress(press) = &events[0] else {
        panic!("expected a press, got {events:?}");
    };
    assert_eq!(u16::from(press.state) & 0xff, 0, "{:?}", press.state);

    assert!(matches!(
        desktop.click(Button::Left, 1, &["ctrl", "hyperdrive"]),
        Err(DesktopError::KeyName(_))
    ));
    Ok(())
}

#[test]
fn a_drag_is_one_press_motion_through_the_path_and_one_release() -> Result<()> {
    let (_xvfb, client, desktop) = setup()?;
    desktop.move_to(10, 10)?;
    common::drain(&client)?;
    let path = [(250, 150), (300, 170), (360, 220), (420, 300), (500, 310)];
    desktop.drag(&path, Button::Left, Duration::from_millis(2))?;
    let events = common::collect(
        &client,
        TIMEOUT,
        SETTLE,
        |e| is_button(e) || matches!(e, Event::MotionNotify(_)),
        |events| events.iter().any(|e| matches!(e, Event::ButtonRelease(_))),
    )?;
    let press_at = events
        .iter()
        .position(|e| matches!(e, Event::ButtonPress(_)))
        .expect("a press");
    let presses: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ButtonPress(p) => Some((p.detail, p.root_x, p.root_y)),
            _ => None,
        })
        .collect();
    let releases: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ButtonRelease(r) => Some((r.detail, r.root_x, r.root_y)),
            _ => None,
        })
        .collect();
    assert_eq!(presses, vec![(1, 250, 150)], "{events:?}");
    assert_eq!(releases, vec![(1, 500, 310)], "{events:?}");
    let motions_while_pressed: Vec<(i32, i32)> = events[press_at..]
        .iter()
        .filter_map(|e| match e {
            Event::MotionNotify(m) => Some((m.root_x.into(), m.root_y.into())),
            _ => None,
        })
        .collect();
    assert_eq!(motions_while_pressed, path[1..].to_vec(), "{events:?}");
    assert!(
        matches!(events.last(), Some(Event::ButtonRelease(_))),
        "{events:?}"
    );
    assert!(matches!(
        desktop.drag(&[(1, 1)], Button::Left, Duration::ZERO),
        Err(DesktopError::DragPathTooShort(1))
    ));
    Ok(())
}

/// A button event's button and position.
type ButtonAt = (u8, i16, i16);

/// (button, x, y) of each press and each release among `events`.
fn presses_and_releases(events: &[Event]) -> (Vec<ButtonAt>, Vec<ButtonAt>) {
    let mut presses = Vec::new();
    let mut releases = Vec::new();
    for event in events {
        match event {
            Event::ButtonPress(p) => presses.push((p.detail, p.root_x, p.root_y)),
            Event::ButtonRelease(r) => releases.push((r.detail, r.root_x, r.root_y)),
            _ => {}
        }
    }
    (presses, releases)
}

#[test]
fn straight_drags_start_at_the_pointer_and_move_in_short_steps() -> Result<()> {
    let (_xvfb, client, desktop) = setup()?;
    desktop.move_to(250, 150)?;
    common::drain(&client)?;
    let until_release = |client: &RustConnection| {
        common::collect(
            client,
            TIMEOUT,
            SETTLE,
            |e| is_button(e) || matches!(e, Event::MotionNotify(_)),
            |events| events.iter().any(|e| matches!(e, Event::ButtonRelease(_))),
        )
    };

    desktop.drag_to((450, 150), Button::Left, Duration::from_millis(1))?;
    let events = until_release(&client)?;
    let (presses, releases) = presses_and_releases(&events);
    assert_eq!(presses, vec![(1, 250, 150)], "{events:?}");
    assert_eq!(releases, vec![(1, 450, 150)], "{events:?}");
    let press_at = events
        .iter()
        .position(|e| matches!(e, Event::ButtonPress(_)))
        .expect("a press");
    let motions: Vec<i16> = events[press_at..]
        .iter()
        .filter_map(|e| match e {
            Event::MotionNotify(m) => Some(m.root_x),
            _ => None,
        })
        .collect();
    // 200 pixels in ten steps of 20.
    assert_eq!(motions, (1..=10).map(|i| 250 + 20 * i).collect::<Vec<_>>());

    common::drain(&client)?;
    desktop.drag_by((-100, 50), Button::Right, Duration::ZERO)?;
    let events = until_release(&client)?;
    let (presses, releases) = presses_and_releases(&events);
    assert_eq!(presses, vec![(3, 450, 150)], "{events:?}");
    assert_eq!(releases, vec![(3, 350, 200)], "{events:?}");
    assert_eq!(desktop.cursor_position()?, (350, 200));
    Ok(())
}

#[test]
fn scrolling_sends_one_wheel_click_per_notch() -> Result<()> {
    let (_xvfb, client, desktop) = setup()?;
    desktop.move_to(400, 300)?;
    common::drain(&client)?;
    for (dx, dy, code, notches) in [(0, 3, 5, 3), (0, -2, 4, 2), (1, 0, 7, 1), (-2, 0, 6, 2)] {
        desktop.scroll(dx, dy)?;
        let events = buttons(&client, notches)?;
        let details: Vec<(bool, u8)> = events
            .iter()
            .map(|e| match e {
                Event::ButtonPress(p) => (true, p.detail),
                Event::ButtonRelease(r) => (false, r.detail),
                _ => unreachable!("only button events are kept"),
            })
            .collect();
        let expected: Vec<(bool, u8)> = (0..notches)
            .flat_map(|_| [(true, code), (false, code)])
            .collect();
        assert_eq!(details, expected, "scroll({dx}, {dy})");
    }
    assert!(matches!(
        desktop.scroll(0, 5000),
        Err(DesktopError::ScrollTooLong(5000))
    ));
    Ok(())
}

#[test]
fn button_down_and_up_are_separate() -> Result<()> {
    let (_xvfb, client, desktop) = setup()?;
    desktop.move_to(400, 300)?;
    common::drain(&client)?;
    desktop.button_down(Button::Left)?;
    let events = common::collect(&client, TIMEOUT, SETTLE, is_button, |e| !e.is_empty())?;
    assert!(matches!(events.as_slice(), [Event::ButtonPress(p)] if p.detail == 1));
    desktop.move_to(420, 310)?;
    desktop.button_up(Button::Left)?;
    let events = common::collect(&client, TIMEOUT, SETTLE, is_button, |e| !e.is_empty())?;
    assert!(
        matches!(events.as_slice(), [Event::ButtonRelease(r)] if r.detail == 1 && (r.root_x, r.root_y) == (420, 310))
    );
    Ok(())
}
