//! The desktop through the client, on a real Xvfb: a downscaled screenshot whose headers and
//! pixels agree with the screen, a click aimed in that image's pixels (via `screenshot_id`)
//! arriving at the mapped screen pixel as a real X button press, and `WAIT_SETTLED`.

use crate::common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use sandbox_client::types::{DesktopAction, DesktopButton, DesktopScreenshotQuery, ImageFormat};
use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{ConnectionExt as _, CreateWindowAux, EventMask, WindowClass};
use x11rb::rust_connection::RustConnection;

/// The red window the test clicks into, in screen pixels: x, y, width, height.
const WINDOW: (i16, i16, u16, u16) = (400, 200, 200, 100);

#[tokio::test]
async fn screenshot_headers_and_a_click_through_them() -> Result<()> {
    let xvfb = common::Xvfb::start()?;
    let (conn, screen) = RustConnection::connect(Some(&xvfb.display))?;
    let window = red_window(&conn, screen)?;
    let sandbox = common::start(common::Options {
        display: Some(xvfb.display.clone()),
        ..Default::default()
    })
    .await?;
    let client = sandbox.client();

    // Half the screen's width: the scale is 2 both ways (the aspect ratio is kept).
    let shot = client
        .screenshot(&DesktopScreenshotQuery {
            max_width: Some(640),
            ..Default::default()
        })
        .await?;
    let info = shot.info;
    assert_eq!(shot.content_type, "image/png");
    assert_eq!(
        (info.screen_width, info.screen_height),
        common::SCREEN,
        "{info:?}"
    );
    assert_eq!(
        (info.image_width, info.image_height),
        (640, 400),
        "{info:?}"
    );
    assert_eq!((info.scale_x, info.scale_y), (2.0, 2.0), "{info:?}");
    let (width, height, pixels) = decode_rgb(&shot.bytes)?;
    assert_eq!((width, height), (640, 400));
    let at = |x: u32, y: u32| {
        let i = ((y * width + x) * 3) as usize;
        [pixels[i], pixels[i + 1], pixels[i + 2]]
    };
    // The window's middle, (500, 250) on the screen, is (250, 125) in the image.
    assert_eq!(at(250, 125), [255, 0, 0]);
    assert_ne!(at(100, 50), [255, 0, 0]);

    // Click at (250, 125) in the image: the screen pixel under its centre is (501, 251).
    let data = client
        .action(&DesktopAction::Click {
            x: Some(250.0),
            y: Some(125.0),
            button: Some(DesktopButton::Left),
            num_clicks: None,
            modifiers: None,
            screenshot_id: Some(info.id),
        })
        .await?;
    assert_eq!(data.action_performed, "CLICK");
    let cursor = data.cursor.context("no cursor in the answer")?;
    assert_eq!((cursor.x, cursor.y), (501, 251));
    let press = wait_for(
        &conn,
        Duration::from_secs(5),
        |event| matches!(event, Event::ButtonPress(press) if press.event == window),
    )?;
    let Event::ButtonPress(press) = press else {
        bail!("not a button press: {press:?}");
    };
    assert_eq!((press.root_x, press.root_y, press.detail), (501, 251, 1));

    // Nothing moves on this screen: it settles at once.
    let settle = client
        .wait_settled(
            Some(Duration::from_millis(100)),
            Some(Duration::from_secs(5)),
        )
        .await?;
    assert!(settle.settled, "{settle:?}");

    // JPEG, full size.
    let jpeg = client
        .screenshot(&DesktopScreenshotQuery {
            format: Some(ImageFormat::Jpeg),
            quality: Some(50),
            ..Default::default()
        })
        .await?;
    assert_eq!(jpeg.content_type, "image/jpeg");
    assert!(jpeg.bytes.starts_with(&[0xFF, 0xD8]));
    assert_eq!(
        (jpeg.info.image_width, jpeg.info.image_height),
        common::SCREEN
    );
    assert!(jpeg.info.id > info.id);
    Ok(())
}

/// Creates and maps an override-redirect red window at [`WINDOW`] that reports button presses.
fn red_window(conn: &RustConnection, screen: usize) -> Result<u32> {
    let root = conn.setup().roots[screen].root;
    let id = conn.generate_id()?;
    let aux = CreateWindowAux::new()
        .background_pixel(0xFF0000)
        .override_redirect(1)
        .event_mask(EventMask::BUTTON_PRESS | EventMask::EXPOSURE);
    let (x, y, width, height) = WINDOW;
    conn.create_window(
        x11rb::COPY_DEPTH_FROM_PARENT,
        id,
        root,
        x,
        y,
        width,
        height,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &aux,
    )?
    .check()?;
    conn.map_window(id)?.check()?;
    wait_for(
        conn,
        Duration::from_secs(5),
        |e| matches!(e, Event::Expose(expose) if expose.window == id),
    )
    .context("the window was never exposed")?;
    Ok(id)
}

/// Reads events until one matches, failing after `timeout`.
fn wait_for(
    conn: &RustConnection,
    timeout: Duration,
    matches: impl Fn(&Event) -> bool,
) -> Result<Event> {
    let deadline = Instant::now() + timeout;
    loop {
        conn.flush()?;
        while let Some(event) = conn.poll_for_event()? {
            if matches(&event) {
                return Ok(event);
            }
        }
        ensure!(
            Instant::now() < deadline,
            "no matching event within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Width, height and RGB rows of a PNG.
fn decode_rgb(bytes: &[u8]) -> Result<(u32, u32, Vec<u8>)> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info()?;
    let mut pixels = vec![0; reader.output_buffer_size().context("PNG too large")?];
    let frame = reader.next_frame(&mut pixels)?;
    ensure!(
        frame.color_type == png::ColorType::Rgb,
        "{:?}",
        frame.color_type
    );
    pixels.truncate(frame.buffer_size());
    Ok((frame.width, frame.height, pixels))
}
