//! Screen capture of the root window into a [`Frame`].
//!
//! The fast path is MIT-SHM 1.2: the server creates a shared memory segment and passes its file
//! descriptor over the connection; `ShmGetImage` writes the screen into it and the pixels are read
//! from the descriptor (no unsafe code, no SysV IPC, so it works across IPC namespaces). The
//! segment is reused between captures and recreated when the screen size changes. When SHM is
//! unavailable (no extension, a version before 1.2, a TCP connection that cannot pass
//! descriptors) or fails once, capture falls back to plain `GetImage` for the life of the
//! [`Desktop`].

use std::fs::File;
use std::os::unix::fs::FileExt;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::shm::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{ConnectionExt as _, ImageFormat, ImageOrder, Visualid, Window};
use x11rb::rust_connection::RustConnection;

use crate::error::{DesktopError, StepExt};
use crate::frame::Frame;
use crate::{Desktop, lock};

/// The SHM state of a [`Desktop`], reused between captures.
#[derive(Debug, Default)]
pub(crate) struct Capturer {
    shm: Shm,
}

#[derive(Debug, Default)]
enum Shm {
    /// Not tried yet.
    #[default]
    Untried,
    /// A segment attached on the server, sized for the last capture.
    Ready(Segment),
    /// The server cannot do MIT-SHM 1.2 with this connection; use GetImage.
    Unavailable,
}

#[derive(Debug)]
struct Segment {
    id: shm::Seg,
    /// The segment's memory, shared with the server.
    file: File,
    size: u32,
}

/// Image bytes as the server sent them.
struct RawImage {
    depth: u8,
    visual: Visualid,
    data: Vec<u8>,
}

impl Desktop {
    /// Captures the whole screen. The size is read from the root window on every call, so a
    /// resolution change (RandR) is followed at once.
    pub fn capture(&self) -> Result<Frame, DesktopError> {
        let (width, height) = self.screen_size()?;
        let raw = {
            let mut capturer = lock(&self.capturer);
            match capturer.grab_shm(&self.conn, self.root, width, height) {
                Ok(Some(raw)) => raw,
                Ok(None) => self.grab_plain(width, height)?,
                Err(error) => {
                    tracing::warn!(%error, "MIT-SHM capture failed; using GetImage from now on");
                    capturer.disable(&self.conn);
                    self.grab_plain(width, height)?
                }
            }
        };
        self.to_frame(raw, width, height)
    }

    /// Whether captures currently go through MIT-SHM (after the first capture decided).
    pub fn capture_uses_shm(&self) -> bool {
        matches!(lock(&self.capturer).shm, Shm::Ready(_))
    }

    fn grab_plain(&self, width: u32, height: u32) -> Result<RawImage, DesktopError> {
        const STEP: &str = "capturing the screen with GetImage";
        let (w, h) = screen_dims(width, height);
        let reply = self
            .conn
            .get_image(ImageFormat::Z_PIXMAP, self.root, 0, 0, w, h, u32::MAX)
            .step(STEP)?
            .reply()
            .step(STEP)?;
        Ok(RawImage {
            depth: reply.depth,
            visual: reply.visual,
            data: reply.data,
        })
    }

    /// Converts the server's pixel layout to BGRX.
    fn to_frame(&self, raw: RawImage, width: u32, height: u32) -> Result<Frame, DesktopError> {
        let setup = self.conn.setup();
        let bits_per_pixel = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == raw.depth)
            .map_or(0, |f| f.bits_per_pixel);
        let scanline_pad = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == raw.depth)
            .map_or(32, |f| f.scanline_pad);
        let visual = setup
            .roots
            .iter()
            .flat_map(|s| &s.allowed_depths)
            .flat_map(|d| &d.visuals)
            .find(|v| v.visual_id == raw.visual);
        let (red, green, blue) =
            visual.map_or((0, 0, 0), |v| (v.red_mask, v.green_mask, v.blue_mask));
        let unsupported = || DesktopError::PixelFormat {
            depth: raw.depth,
            bits_per_pixel,
            red_mask: red,
            green_mask: green,
            blue_mask: blue,
        };
        let bytes_per_pixel = match bits_per_pixel {
            24 => 3,
            32 => 4,
            _ => return Err(unsupported()),
        };
        let (Some(red_shift), Some(green_shift), Some(blue_shift)) =
            (byte_shift(red), byte_shift(green), byte_shift(blue))
        else {
            return Err(unsupported());
        };
        let pad_bits = usize::from(scanline_pad.max(8));
        let stride =
            (width as usize * usize::from(bits_per_pixel)).div_ceil(pad_bits) * pad_bits / 8;
        let expected = stride * height as usize;
        if raw.data.len() < expected {
            return Err(DesktopError::ShortImage {
                got: raw.data.len(),
                expected,
            });
        }
        let little_endian = setup.image_byte_order == ImageOrder::LSB_FIRST;
        let is_bgrx = bytes_per_pixel == 4
            && little_endian
            && (red_shift, green_shift, blue_shift) == (16, 8, 0)
            && stride == width as usize * 4;
        if is_bgrx {
            let mut data = raw.data;
            data.truncate(expected);
            return Ok(Frame {
                width,
                height,
                pixels: data,
            });
        }
        let mut pixels = Vec::with_capacity(width as usize * height as usize * 4);
        for row in raw.data.chunks_exact(stride).take(height as usize) {
            for px in row.chunks_exact(bytes_per_pixel).take(width as usize) {
                let value = px.iter().enumerate().fold(0u32, |acc, (i, &b)| {
                    let shift = if little_endian {
                        8 * i
                    } else {
                        8 * (bytes_per_pixel - 1 - i)
                    };
                    acc | u32::from(b) << shift
                });
                let channel = |shift: u32| (value >> shift) as u8;
                pixels.extend_from_slice(&[
                    channel(blue_shift),
                    channel(green_shift),
                    channel(red_shift),
                    0,
                ]);
            }
        }
        Ok(Frame {
            width,
            height,
            pixels,
        })
    }
}

/// The shift of an 8-bit channel mask (`0xff << shift`), or `None` for other masks.
fn byte_shift(mask: u32) -> Option<u32> {
    let shift = mask.trailing_zeros();
    (shift <= 24 && mask >> shift == 0xff).then_some(shift)
}

/// Screen dimensions as the protocol's u16 (the root size came from a u16 reply).
fn screen_dims(width: u32, height: u32) -> (u16, u16) {
    (
        u16::try_from(width).unwrap_or(u16::MAX),
        u16::try_from(height).unwrap_or(u16::MAX),
    )
}

impl Capturer {
    /// Captures through the SHM segment; `Ok(None)` when SHM is not available.
    fn grab_shm(
        &mut self,
        conn: &RustConnection,
        root: Window,
        width: u32,
        height: u32,
    ) -> Result<Option<RawImage>, DesktopError> {
        const STEP: &str = "capturing the screen with MIT-SHM";
        if matches!(self.shm, Shm::Untried) && !shm_fd_passing_available(conn)? {
            tracing::debug!("MIT-SHM 1.2 is not available; capturing with GetImage");
            self.shm = Shm::Unavailable;
        }
        if matches!(self.shm, Shm::Unavailable) {
            return Ok(None);
        }
        // Four bytes per pixel is the largest Z-pixmap layout this crate converts.
        let size = width.saturating_mul(height).saturating_mul(4);
        let reuse = matches!(&self.shm, Shm::Ready(segment) if segment.size == size);
        if !reuse {
            self.release(conn);
            let id = conn.generate_id().step(STEP)?;
            let reply = conn
                .shm_create_segment(id, size, false)
                .step(STEP)?
                .reply()
                .step(STEP)?;
            self.shm = Shm::Ready(Segment {
                id,
                file: File::from(reply.shm_fd),
                size,
            });
        }
        let Shm::Ready(segment) = &self.shm else {
            return Ok(None);
        };
        let (w, h) = screen_dims(width, height);
        let reply = conn
            .shm_get_image(
                root,
                0,
                0,
                w,
                h,
                u32::MAX,
                ImageFormat::Z_PIXMAP.into(),
                segment.id,
                0,
            )
            .step(STEP)?
            .reply()
            .step(STEP)?;
        // The reply comes after the server has written the image, so the bytes are complete.
        let len = reply.size.min(segment.size) as usize;
        let mut data = vec![0u8; len];
        segment
            .file
            .read_exact_at(&mut data, 0)
            .map_err(|source| DesktopError::ShmRead { source })?;
        Ok(Some(RawImage {
            depth: reply.depth,
            visual: reply.visual,
            data,
        }))
    }

    /// Detaches the segment, if any. The server frees segments of closed connections itself.
    pub(crate) fn release(&mut self, conn: &RustConnection) {
        if let Shm::Ready(segment) = std::mem::take(&mut self.shm) {
            // Checked, so a failure does not surface later as an event on the connection.
            if let Ok(cookie) = conn.shm_detach(segment.id)
                && let Err(error) = cookie.check()
            {
                tracing::debug!(%error, "detaching the MIT-SHM segment failed");
            }
        }
    }

    fn disable(&mut self, conn: &RustConnection) {
        self.release(conn);
        self.shm = Shm::Unavailable;
    }
}

/// Whether the server has MIT-SHM 1.2 (server-created segments passed as file descriptors).
fn shm_fd_passing_available(conn: &RustConnection) -> Result<bool, DesktopError> {
    const STEP: &str = "checking for the MIT-SHM extension";
    if conn
        .extension_information(shm::X11_EXTENSION_NAME)
        .step(STEP)?
        .is_none()
    {
        return Ok(false);
    }
    let version = conn.shm_query_version().step(STEP)?.reply().step(STEP)?;
    Ok((version.major_version, version.minor_version) >= (1, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(width: u32, height: u32, bgrx: &[[u8; 4]]) -> Frame {
        Frame {
            width,
            height,
            pixels: bgrx.iter().flatten().copied().collect(),
        }
    }

    #[test]
    fn pixels_read_back_as_rgb() {
        let f = frame(2, 1, &[[1, 2, 3, 0], [4, 5, 6, 0]]);
        assert_eq!(f.rgb_at(0, 0), Some([3, 2, 1]));
        assert_eq!(f.rgb_at(1, 0), Some([6, 5, 4]));
        assert_eq!(f.rgb_at(2, 0), None);
        assert_eq!(f.to_rgb8(), vec![3, 2, 1, 6, 5, 4]);
    }

    #[test]
    fn fingerprint_sees_pixels_and_size_but_not_padding_bytes() {
        let mut pixels = vec![[10, 20, 30, 0]; 100];
        let base = frame(10, 10, &pixels);
        pixels[57][3] = 99;
        assert_eq!(frame(10, 10, &pixels).fingerprint(), base.fingerprint());
        pixels[57][1] = 21;
        assert_ne!(frame(10, 10, &pixels).fingerprint(), base.fingerprint());
        let pixels = vec![[10, 20, 30, 0]; 100];
        assert_ne!(frame(20, 5, &pixels).fingerprint(), base.fingerprint());
        // A change in the tail that does not fill a whole block counts too.
        let mut pixels = vec![[0, 0, 0, 0]; 9];
        let base = frame(3, 3, &pixels);
        pixels[8][0] = 1;
        assert_ne!(frame(3, 3, &pixels).fingerprint(), base.fingerprint());
    }

    #[test]
    fn channel_masks() {
        assert_eq!(byte_shift(0xff0000), Some(16));
        assert_eq!(byte_shift(0xff), Some(0));
        assert_eq!(byte_shift(0xff00_0000), Some(24));
        assert_eq!(byte_shift(0xf800), None);
        assert_eq!(byte_shift(0), None);
    }
}
