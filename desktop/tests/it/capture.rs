//! Capture, encoding and settle detection against a real Xvfb.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use common::{HEIGHT, WIDTH, Xvfb};
use desktop::{Desktop, ImageFormat, encode};
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{ChangeWindowAttributesAux, ConnectionExt as _, EventMask};

/// The test window: orange at (100, 150), 200x100.
const ORANGE: u32 = 0xff8000;
const RECT: (i16, i16, u16, u16) = (100, 150, 200, 100);

fn decode_png(bytes: &[u8]) -> Result<(u32, u32, Vec<u8>)> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().context("PNG size")?];
    let info = reader.next_frame(&mut buf)?;
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    Ok((info.width, info.height, buf))
}

fn rgb(at: &[u8], width: u32, x: u32, y: u32) -> [u8; 3] {
    let i = ((y * width + x) * 3) as usize;
    [at[i], at[i + 1], at[i + 2]]
}

#[test]
fn capture_has_the_screen_size_and_uses_shm() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    assert_eq!(desktop.screen_size()?, (WIDTH, HEIGHT));
    for _ in 0..2 {
        let frame = desktop.capture()?;
        assert_eq!((frame.width, frame.height), (WIDTH, HEIGHT));
        assert_eq!(frame.pixels.len(), (WIDTH * HEIGHT * 4) as usize);
        assert!(desktop.capture_uses_shm(), "Xvfb has MIT-SHM 1.2");
    }
    Ok(())
}

#[test]
fn a_coloured_window_shows_in_the_frame_and_the_png() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let client = xvfb.client()?;
    common::window(&client, RECT, ORANGE, EventMask::NO_EVENT)?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let frame = desktop.capture()?;
    let orange = [0xff, 0x80, 0x00];
    for (x, y) in [(100, 150), (299, 249), (200, 200)] {
        assert_eq!(frame.rgb_at(x, y), Some(orange), "inside at ({x}, {y})");
    }
    for (x, y) in [(99, 150), (300, 249), (200, 149), (200, 250)] {
        assert_ne!(frame.rgb_at(x, y), Some(orange), "outside at ({x}, {y})");
    }

    let image = encode(&frame, ImageFormat::Png, None)?;
    assert_eq!(
        (image.width, image.height, image.mime),
        (WIDTH, HEIGHT, "image/png")
    );
    let (width, height, pixels) = decode_png(&image.bytes)?;
    assert_eq!((width, height), (WIDTH, HEIGHT));
    assert_eq!(pixels, frame.to_rgb8(), "the PNG holds exactly the frame");
    assert_eq!(rgb(&pixels, width, 200, 200), orange);
    assert_ne!(rgb(&pixels, width, 99, 150), orange);
    Ok(())
}

#[test]
fn a_downscaled_screenshot_maps_back_to_the_screen() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let client = xvfb.client()?;
    common::window(&client, RECT, ORANGE, EventMask::NO_EVENT)?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let target = desktop::fit_within((WIDTH, HEIGHT), (1024, 768));
    assert_eq!(target, (1024, 640));
    let image = desktop.screenshot(ImageFormat::Png, Some(target))?;
    assert_eq!((image.width, image.height), (1024, 640));
    assert_eq!((image.scale_x, image.scale_y), (1.25, 1.25));
    let (width, _, pixels) = decode_png(&image.bytes)?;
    // The window's centre (200, 200) is at (160, 160) on the image, and maps back there.
    assert_eq!(rgb(&pixels, width, 160, 160), [0xff, 0x80, 0x00]);
    assert_eq!(image.to_screen(160.0, 160.0), (200, 200));

    let jpeg = desktop.screenshot(ImageFormat::Jpeg { quality: 80 }, None)?;
    assert_eq!(
        (jpeg.width, jpeg.height, jpeg.mime),
        (WIDTH, HEIGHT, "image/jpeg")
    );
    assert_eq!(&jpeg.bytes[..3], &[0xff, 0xd8, 0xff]);
    Ok(())
}

#[test]
fn capture_falls_back_to_get_image_without_fd_passing() -> Result<()> {
    // Over TCP the server cannot pass the segment's file descriptor.
    let xvfb = Xvfb::start_with(&["-listen", "tcp"])?;
    let client = xvfb.client()?;
    common::window(&client, RECT, ORANGE, EventMask::NO_EVENT)?;
    let desktop = Desktop::connect(&format!("127.0.0.1{}", xvfb.display))?;
    for _ in 0..2 {
        let frame = desktop.capture()?;
        assert_eq!((frame.width, frame.height), (WIDTH, HEIGHT));
        assert_eq!(frame.rgb_at(200, 200), Some([0xff, 0x80, 0x00]));
        assert!(!desktop.capture_uses_shm());
    }
    // The connection is still healthy for input.
    desktop.move_to(5, 6)?;
    assert_eq!(desktop.cursor_position()?, (5, 6));
    Ok(())
}

#[test]
fn a_static_screen_settles_quickly() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let report = desktop.wait_until_settled(Duration::from_millis(200), Duration::from_secs(5))?;
    assert!(report.settled, "{report:?}");
    assert!(report.waited >= Duration::from_millis(200), "{report:?}");
    // Well before the timeout (loose, for loaded machines).
    assert!(report.waited < Duration::from_secs(2), "{report:?}");
    assert!(report.frames >= 2, "{report:?}");
    Ok(())
}

#[test]
fn an_effect_already_on_screen_halves_the_quiet_period_and_none_keeps_it() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let quiet = Duration::from_millis(400);
    let timeout = Duration::from_secs(10);
    // Nothing changed since "before": the whole quiet period, as without a reference.
    let before = desktop.capture()?.fingerprint();
    let report = desktop.wait_until_settled_after(Some(before), quiet, timeout)?;
    assert!(report.settled, "{report:?}");
    assert_eq!(report.quiet, quiet, "{report:?}");
    assert!(report.waited >= quiet, "{report:?}");
    assert_eq!(report.last_change, None, "{report:?}");
    // The "action" painted a window before the wait began: half the quiet period.
    let before = desktop.capture()?.fingerprint();
    let client = xvfb.client()?;
    common::window(&client, RECT, ORANGE, EventMask::NO_EVENT)?;
    x11rb::wrapper::ConnectionExt::sync(&client)?;
    let report = desktop.wait_until_settled_after(Some(before), quiet, timeout)?;
    assert!(report.settled, "{report:?}");
    assert_eq!(report.quiet, quiet / 2, "{report:?}");
    assert!(report.waited >= quiet / 2, "{report:?}");
    // No reference (a WAIT_SETTLED on its own): the whole quiet period.
    let report = desktop.wait_until_settled_after(None, quiet, timeout)?;
    assert_eq!(report.quiet, quiet, "{report:?}");
    assert!(report.waited >= quiet, "{report:?}");
    Ok(())
}

#[test]
fn a_repainting_screen_does_not_settle_before_the_timeout() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let client = xvfb.client()?;
    let window = common::window(&client, RECT, ORANGE, EventMask::NO_EVENT)?;
    let stop = Arc::new(AtomicBool::new(false));
    let painter = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || -> Result<()> {
            let mut colour = 0u32;
            while !stop.load(Ordering::Relaxed) {
                colour = (colour + 0x10305) & 0xffffff;
                let aux = ChangeWindowAttributesAux::new().background_pixel(colour);
                client.change_window_attributes(window, &aux)?;
                client.clear_area(false, window, 0, 0, 0, 0)?;
                client.flush()?;
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(())
        }
    });
    let desktop = Desktop::connect(&xvfb.display)?;
    // The painter changes the screen every 10 ms; the quiet period is long enough that a
    // painter starved by a loaded machine does not let the screen look settled.
    let timeout = Duration::from_millis(1500);
    let report = desktop.wait_until_settled(Duration::from_millis(400), timeout);
    stop.store(true, Ordering::Relaxed);
    painter.join().expect("painter thread")?;
    let report = report?;
    assert!(!report.settled, "{report:?}");
    assert!(report.waited >= timeout, "{report:?}");
    assert!(
        report.waited < timeout + Duration::from_secs(1),
        "{report:?}"
    );
    assert!(report.frames >= 5, "{report:?}");
    Ok(())
}
