//! Baseline JPEG from BGRX pixels through libjpeg-turbo, on two cores for large frames.
//!
//! libjpeg-turbo encodes on one thread. A large frame is cut at an MCU-row boundary into a top
//! and a bottom half, each encoded as its own JPEG on its own thread, and the two scans are
//! joined with a restart marker: a restart resets the DC predictors and byte-aligns the scan,
//! which is exactly where an independently encoded JPEG starts. The result is one baseline JPEG
//! with a restart interval of the top half's MCU count (`DRI`), and it decodes to the same
//! pixels as the one-thread encode: colour conversion and 4:2:0 downsampling are per MCU, the
//! bottom edge is padded the same way, and both halves share the quantisation and Huffman
//! tables (libjpeg-turbo's standard ones for the quality), which is checked before joining.
//! Anything unexpected in the halves' headers falls back to the one-thread encode.

use crate::capture::Frame;
use crate::encode::EncodeError;

/// From this JPEG quality up, colour is kept at full resolution (4:4:4) instead of 4:2:0.
pub(crate) const FULL_CHROMA_QUALITY: u8 = 90;

/// Frames with fewer pixels than this are encoded on one thread: below it, a thread's start
/// costs more than half the encode saves.
const PARALLEL_MIN_PIXELS: usize = 256 * 1024;

/// Encodes BGRX pixels (`width * height * 4` bytes, checked by the caller) as a baseline JPEG.
pub(crate) fn encode(
    bgrx: &[u8],
    width: u32,
    height: u32,
    quality: u8,
) -> Result<Vec<u8>, EncodeError> {
    if !(1..=100).contains(&quality) {
        return Err(EncodeError::JpegQuality(quality));
    }
    let split = split_row(width, height, quality);
    match split {
        Some(split) => {
            let pitch = width as usize * Frame::BYTES_PER_PIXEL;
            let (top, bottom) = bgrx.split_at(split as usize * pitch);
            let (top, bottom) = std::thread::scope(|scope| {
                let top = scope.spawn(|| encode_one(top, width, split, quality));
                let bottom = encode_one(bottom, width, height - split, quality);
                // A panic in the encoder thread is not expected (libjpeg-turbo errors come back
                // as values); if one happens, fall back to the one-thread encode below.
                (top.join().ok(), bottom)
            });
            if let (Some(Ok(top)), Ok(bottom)) = (top, bottom)
                && let Some(joined) = join(&top, &bottom, height, mcus(width, split, quality))
            {
                return Ok(joined);
            }
            tracing::debug!("two-part JPEG could not be joined; encoding on one thread");
            encode_one(bgrx, width, height, quality)
        }
        None => encode_one(bgrx, width, height, quality),
    }
}

/// The MCU's size in pixels for `quality`'s subsampling.
fn mcu_size(quality: u8) -> (u32, u32) {
    if quality >= FULL_CHROMA_QUALITY {
        (8, 8)
    } else {
        (16, 16)
    }
}

/// MCUs in a `width x rows` band (rows a multiple of the MCU height).
fn mcus(width: u32, rows: u32, quality: u8) -> usize {
    let (mcu_w, mcu_h) = mcu_size(quality);
    width.div_ceil(mcu_w) as usize * (rows / mcu_h) as usize
}

/// Where to cut the frame: the first MCU-row boundary at or after half the height, so the
/// bottom half never has more MCUs than the restart interval (the top half's count). None when
/// the frame is too small to gain from two threads or the interval would not fit in `DRI`.
fn split_row(width: u32, height: u32, quality: u8) -> Option<u32> {
    if (width as usize).saturating_mul(height as usize) < PARALLEL_MIN_PIXELS {
        return None;
    }
    let (_, mcu_h) = mcu_size(quality);
    let split = height.div_ceil(2).div_ceil(mcu_h) * mcu_h;
    let fits = split < height && u16::try_from(mcus(width, split, quality)).is_ok();
    fits.then_some(split)
}

fn encode_one(bgrx: &[u8], width: u32, height: u32, quality: u8) -> Result<Vec<u8>, EncodeError> {
    let mut compressor = turbojpeg::Compressor::new().map_err(EncodeError::Jpeg)?;
    compressor
        .set_quality(i32::from(quality))
        .map_err(EncodeError::Jpeg)?;
    let subsampling = if quality >= FULL_CHROMA_QUALITY {
        turbojpeg::Subsamp::None
    } else {
        turbojpeg::Subsamp::Sub2x2
    };
    compressor
        .set_subsamp(subsampling)
        .map_err(EncodeError::Jpeg)?;
    let image = turbojpeg::Image {
        pixels: bgrx,
        width: width as usize,
        pitch: width as usize * Frame::BYTES_PER_PIXEL,
        height: height as usize,
        format: turbojpeg::PixelFormat::BGRX,
    };
    compressor.compress_to_vec(image).map_err(EncodeError::Jpeg)
}

const SOF0: u8 = 0xC0;
const DRI: u8 = 0xDD;
const SOS: u8 = 0xDA;
const RST0: u8 = 0xD0;
const SOI: [u8; 2] = [0xFF, 0xD8];
const EOI: [u8; 2] = [0xFF, 0xD9];

/// A JPEG cut into its header segments (each with its marker, up to and including SOS) and
/// its entropy-coded scan (without EOI).
struct Parts<'a> {
    segments: Vec<(u8, &'a [u8])>,
    scan: &'a [u8],
}

/// Splits a one-scan baseline JPEG as libjpeg-turbo writes it; None for anything else.
fn parts(jpeg: &[u8]) -> Option<Parts<'_>> {
    let body = jpeg.strip_prefix(&SOI)?.strip_suffix(&EOI)?;
    let mut segments = Vec::new();
    let mut at = 0;
    loop {
        let [0xFF, marker, hi, lo] = *body.get(at..at + 4)? else {
            return None;
        };
        let end = at + 2 + usize::from(u16::from_be_bytes([hi, lo]));
        segments.push((marker, body.get(at..end)?));
        at = end;
        if marker == SOS {
            return Some(Parts {
                segments,
                scan: &body[at..],
            });
        }
    }
}

/// The SOF0 segment with the image height replaced (bytes 5-6 after the marker).
fn with_height(sof: &[u8], height: u32) -> Option<Vec<u8>> {
    let height = u16::try_from(height).ok()?;
    let mut sof = sof.to_vec();
    sof.get_mut(5..7)?.copy_from_slice(&height.to_be_bytes());
    Some(sof)
}

/// Joins the top and bottom JPEGs into one of `height` rows with a restart after `interval`
/// MCUs, or None if their headers differ in anything but the height, or are not what
/// libjpeg-turbo writes.
fn join(top: &[u8], bottom: &[u8], height: u32, interval: usize) -> Option<Vec<u8>> {
    let (top_parts, bottom_parts) = (parts(top)?, parts(bottom)?);
    if top_parts.segments.len() != bottom_parts.segments.len() {
        return None;
    }
    let interval = u16::try_from(interval).ok()?;
    let mut out = Vec::with_capacity(top.len() + bottom.len() + 8);
    out.extend_from_slice(&SOI);
    for (&(marker, segment), &(other_marker, other)) in
        top_parts.segments.iter().zip(&bottom_parts.segments)
    {
        if marker != other_marker || marker == DRI {
            return None;
        }
        match marker {
            SOF0 => {
                // The halves differ only in height.
                if with_height(segment, height)? != with_height(other, height)? {
                    return None;
                }
                out.extend_from_slice(&with_height(segment, height)?);
            }
            SOS => {
                if segment != other {
                    return None;
                }
                out.extend_from_slice(&[0xFF, DRI, 0x00, 0x04]);
                out.extend_from_slice(&interval.to_be_bytes());
                out.extend_from_slice(segment);
            }
            // Frames other than baseline (SOF1-SOF15; C4, C8 and CC are DHT, JPG and DAC).
            0xC1..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => return None,
            _ => {
                if segment != other {
                    return None;
                }
                out.extend_from_slice(segment);
            }
        }
    }
    out.extend_from_slice(top_parts.scan);
    out.extend_from_slice(&[0xFF, RST0]);
    out.extend_from_slice(bottom_parts.scan);
    out.extend_from_slice(&EOI);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text-like detail everywhere, so every MCU has AC coefficients and DC varies.
    fn busy(width: u32, height: u32) -> Vec<u8> {
        let mut pixels = Vec::with_capacity(width as usize * height as usize * 4);
        let mut seed = 0x2545_f491_u32;
        for y in 0..height {
            for x in 0..width {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let ink = (x / 3 + y / 5).is_multiple_of(7) || seed.is_multiple_of(11);
                let v = if ink {
                    (seed % 90) as u8
                } else {
                    230 + (x % 20) as u8
                };
                pixels.extend_from_slice(&[v, v.wrapping_add((y % 64) as u8), 255 - v, 0]);
            }
        }
        pixels
    }

    fn decode(bytes: &[u8]) -> (usize, usize, Vec<u8>) {
        let image = turbojpeg::decompress(bytes, turbojpeg::PixelFormat::RGB).expect("valid JPEG");
        (image.width, image.height, image.pixels)
    }

    #[test]
    fn two_halves_decode_to_exactly_the_one_thread_pixels() {
        // The screen, an odd size (partial MCUs at the right and bottom edges), both samplings.
        for (width, height) in [(1280, 800), (1001, 777), (640, 1201)] {
            let pixels = busy(width, height);
            for quality in [80, 95] {
                assert!(split_row(width, height, quality).is_some());
                let two = encode(&pixels, width, height, quality).expect("encodes");
                let one = encode_one(&pixels, width, height, quality).expect("encodes");
                assert!(
                    two.windows(2).any(|w| w == [0xFF, DRI]),
                    "{width}x{height} q{quality}: not the two-part encode"
                );
                let (two_decoded, one_decoded) = (decode(&two), decode(&one));
                assert_eq!(
                    (two_decoded.0, two_decoded.1),
                    (width as usize, height as usize)
                );
                assert!(
                    two_decoded == one_decoded,
                    "{width}x{height} q{quality}: pixels differ from the one-thread encode"
                );
            }
        }
    }

    #[test]
    fn small_frames_and_huge_intervals_stay_on_one_thread() {
        assert_eq!(split_row(64, 64, 80), None);
        assert_eq!(split_row(1280, 800, 80), Some(400));
        assert_eq!(split_row(1280, 801, 80), Some(416));
        assert_eq!(split_row(1280, 800, 95), Some(400));
        // 2048 MCUs a row x 512 rows does not fit DRI's 16 bits.
        assert_eq!(split_row(16_384, 16_384, 95), None);
        let pixels = busy(64, 64);
        let jpeg = encode(&pixels, 64, 64, 80).expect("encodes");
        assert!(!jpeg.windows(2).any(|w| w == [0xFF, DRI]));
    }

    #[test]
    fn headers_that_differ_are_not_joined() {
        let pixels = busy(640, 480);
        let top = encode_one(&pixels[..640 * 240 * 4], 640, 240, 80).expect("encodes");
        let other_quality = encode_one(&pixels[640 * 240 * 4..], 640, 240, 60).expect("encodes");
        assert!(join(&top, &other_quality, 480, mcus(640, 240, 80)).is_none());
        assert!(join(&top, b"not a jpeg", 480, 1).is_none());
        let bottom = encode_one(&pixels[640 * 240 * 4..], 640, 240, 80).expect("encodes");
        let joined = join(&top, &bottom, 480, mcus(640, 240, 80)).expect("joins");
        assert_eq!(decode(&joined).1, 480);
    }
}
