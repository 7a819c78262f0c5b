//! Encoding a [`Frame`] as PNG or JPEG, optionally resized, with the scale factors that map
//! image coordinates back to the screen.
//!
//! PNG uses the `png` crate at `Compression::Fast` with the adaptive filter (about 1.2 ms for a
//! 1280x800 screenshot of a web page). JPEG uses libjpeg-turbo (its SIMD colour conversion, DCT
//! and Huffman coding, through the `turbojpeg` crate, compiled in) straight from the BGRX pixels,
//! with no RGB copy: about 3 ms for a 1280x800 page. Below quality 90 the colour planes are
//! subsampled 4:2:0 (as cjpeg and Chromium's screenshots do; twice as fast as 4:4:4); from 90 up
//! they keep full resolution.

use crate::frame::{Frame, bgrx_to_rgb};
use crate::scale;

/// The largest width or height [`encode`] produces.
pub const MAX_IMAGE_SIDE: u32 = 16_384;

/// An image format to encode to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    /// JPEG with a quality from 1 to 100.
    Jpeg {
        quality: u8,
    },
}

/// An encoded screenshot and how its pixels relate to the screen.
///
/// Image pixel `(x, y)` shows screen pixel `(x * scale_x, y * scale_y)`; use
/// [`EncodedImage::to_screen`] to map a point a model chose on the image to the screen.
#[derive(Clone, PartialEq)]
pub struct EncodedImage {
    pub bytes: Vec<u8>,
    /// Size of the encoded image.
    pub width: u32,
    pub height: u32,
    /// `image/png` or `image/jpeg`.
    pub mime: &'static str,
    /// Size of the screen the frame was captured from.
    pub screen_width: u32,
    pub screen_height: u32,
    /// Screen pixels per image pixel, horizontally and vertically (1.0 when not resized).
    pub scale_x: f64,
    pub scale_y: f64,
}

impl std::fmt::Debug for EncodedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedImage")
            .field("bytes", &self.bytes.len())
            .field("width", &self.width)
            .field("height", &self.height)
            .field("mime", &self.mime)
            .field("screen_width", &self.screen_width)
            .field("screen_height", &self.screen_height)
            .field("scale_x", &self.scale_x)
            .field("scale_y", &self.scale_y)
            .finish()
    }
}

impl EncodedImage {
    /// Maps a point on the image to the screen pixel under the centre of that image pixel,
    /// clamped to the screen.
    pub fn to_screen(&self, x: f64, y: f64) -> (i32, i32) {
        let map = |v: f64, scale: f64, limit: u32| -> i32 {
            let max = f64::from(limit.saturating_sub(1));
            ((v + 0.5) * scale).floor().clamp(0.0, max) as i32
        };
        (
            map(x, self.scale_x, self.screen_width),
            map(y, self.scale_y, self.screen_height),
        )
    }
}

/// What went wrong while encoding, naming the step.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("frame of {width}x{height} has {got} bytes, expected {expected}")]
    FrameSize {
        width: u32,
        height: u32,
        got: usize,
        expected: usize,
    },
    #[error("target size {width}x{height} is empty or larger than {MAX_IMAGE_SIDE} on a side")]
    TargetSize { width: u32, height: u32 },
    #[error("JPEG quality {0} is not between 1 and 100")]
    JpegQuality(u8),
    #[error("encoding PNG")]
    Png(#[source] png::EncodingError),
    #[error("encoding JPEG")]
    Jpeg(#[source] turbojpeg::Error),
}

/// Encodes a frame, resized to `target` (width, height) when given. The aspect ratio is the
/// caller's choice; [`fit_within`] computes a target that keeps it.
pub fn encode(
    frame: &Frame,
    format: ImageFormat,
    target: Option<(u32, u32)>,
) -> Result<EncodedImage, EncodeError> {
    let (width, height) = (frame.width, frame.height);
    let expected = width as usize * height as usize * Frame::BYTES_PER_PIXEL;
    if frame.pixels.len() != expected || width == 0 || height == 0 {
        return Err(EncodeError::FrameSize {
            width,
            height,
            got: frame.pixels.len(),
            expected,
        });
    }
    let (out_w, out_h) = target.unwrap_or((width, height));
    if out_w == 0 || out_h == 0 || out_w > MAX_IMAGE_SIDE || out_h > MAX_IMAGE_SIDE {
        return Err(EncodeError::TargetSize {
            width: out_w,
            height: out_h,
        });
    }
    // Resize before dropping the padding byte: the resizer's cost is per pixel, not per
    // channel, and the conversion then runs on the smaller image.
    let resized;
    let bgrx = if (out_w, out_h) == (width, height) {
        &frame.pixels
    } else {
        resized = scale::resize::<{ Frame::BYTES_PER_PIXEL }>(
            &frame.pixels,
            (width as usize, height as usize),
            (out_w as usize, out_h as usize),
        );
        &resized
    };
    let (bytes, mime) = match format {
        ImageFormat::Png => (encode_png(&bgrx_to_rgb(bgrx), out_w, out_h)?, "image/png"),
        ImageFormat::Jpeg { quality } => (encode_jpeg(bgrx, out_w, out_h, quality)?, "image/jpeg"),
    };
    Ok(EncodedImage {
        bytes,
        width: out_w,
        height: out_h,
        mime,
        screen_width: width,
        screen_height: height,
        scale_x: f64::from(width) / f64::from(out_w),
        scale_y: f64::from(height) / f64::from(out_h),
    })
}

fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(rgb.len() / 4);
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    // After set_compression, which picks its own filter.
    encoder.set_filter(png::Filter::Adaptive);
    let mut writer = encoder.write_header().map_err(EncodeError::Png)?;
    writer.write_image_data(rgb).map_err(EncodeError::Png)?;
    writer.finish().map_err(EncodeError::Png)?;
    Ok(out)
}

/// From this JPEG quality up, colour is kept at full resolution (4:4:4) instead of 4:2:0.
const FULL_CHROMA_QUALITY: u8 = 90;

/// Encodes BGRX pixels (`width * height * 4` bytes, checked by the caller) as a baseline JPEG.
fn encode_jpeg(bgrx: &[u8], width: u32, height: u32, quality: u8) -> Result<Vec<u8>, EncodeError> {
    if !(1..=100).contains(&quality) {
        return Err(EncodeError::JpegQuality(quality));
    }
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

/// The largest size with the aspect ratio of `width x height` that fits in `max_width x
/// max_height`, never larger than the original (each side at least 1).
pub fn fit_within((width, height): (u32, u32), (max_width, max_height): (u32, u32)) -> (u32, u32) {
    if width <= max_width && height <= max_height {
        return (width, height);
    }
    let factor =
        (f64::from(max_width) / f64::from(width)).min(f64::from(max_height) / f64::from(height));
    let fit = |v: u32, max: u32| ((f64::from(v) * factor).round() as u32).clamp(1, max.max(1));
    (fit(width, max_width), fit(height, max_height))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkerboard(width: u32, height: u32) -> Frame {
        let mut pixels = Vec::new();
        for y in 0..height {
            for x in 0..width {
                let v = if (x / 8 + y / 8) % 2 == 0 { 250 } else { 5 };
                pixels.extend_from_slice(&[v, 128, 255 - v, 0]);
            }
        }
        Frame {
            width,
            height,
            pixels,
        }
    }

    #[test]
    fn png_round_trips_exactly() {
        let frame = checkerboard(64, 40);
        let image = encode(&frame, ImageFormat::Png, None).expect("encodes");
        assert_eq!(
            (image.width, image.height, image.mime),
            (64, 40, "image/png")
        );
        assert_eq!((image.scale_x, image.scale_y), (1.0, 1.0));
        let mut reader = png::Decoder::new(std::io::Cursor::new(&image.bytes))
            .read_info()
            .expect("valid PNG header");
        let mut decoded = vec![0; reader.output_buffer_size().expect("size fits")];
        let info = reader.next_frame(&mut decoded).expect("valid PNG data");
        assert_eq!((info.width, info.height), (64, 40));
        assert_eq!(&decoded[..info.buffer_size()], frame.to_rgb8().as_slice());
    }

    /// Decodes a JPEG to packed RGB with libjpeg-turbo.
    fn decode_jpeg(bytes: &[u8]) -> (usize, usize, Vec<u8>) {
        let image = turbojpeg::decompress(bytes, turbojpeg::PixelFormat::RGB).expect("valid JPEG");
        assert_eq!(image.pitch, image.width * 3);
        (image.width, image.height, image.pixels)
    }

    #[test]
    fn jpeg_keeps_colours_and_channel_order() {
        // Solid red, green, blue and grey quadrants of 32x32 pixels.
        let (width, height) = (64u32, 64u32);
        let colour = |x: u32, y: u32| match (x < 32, y < 32) {
            (true, true) => [255u8, 0, 0],
            (false, true) => [0, 255, 0],
            (true, false) => [0, 0, 255],
            (false, false) => [128, 128, 128],
        };
        let mut pixels = Vec::new();
        for y in 0..height {
            for x in 0..width {
                let [r, g, b] = colour(x, y);
                pixels.extend_from_slice(&[b, g, r, 0xAA]);
            }
        }
        let frame = Frame {
            width,
            height,
            pixels,
        };
        // 4:4:4 and 4:2:0 alike; away from the edges, where subsampled colour bleeds.
        for quality in [95, 80] {
            let image = encode(&frame, ImageFormat::Jpeg { quality }, None).expect("encodes");
            assert_eq!(
                (image.width, image.height, image.mime),
                (64, 64, "image/jpeg")
            );
            let (w, h, rgb) = decode_jpeg(&image.bytes);
            assert_eq!((w, h), (64, 64));
            let mut worst = 0;
            for y in (0..height).filter(|v| (4..28).contains(&(v % 32))) {
                for x in (0..width).filter(|v| (4..28).contains(&(v % 32))) {
                    let i = (y * width + x) as usize * 3;
                    for (got, want) in rgb[i..i + 3].iter().zip(colour(x, y)) {
                        worst = worst.max(got.abs_diff(want));
                    }
                }
            }
            assert!(
                worst <= 12,
                "quality {quality}: largest channel error {worst}"
            );
        }
    }

    #[test]
    fn jpeg_quality_trades_size() {
        let frame = checkerboard(128, 80);
        let small = encode(&frame, ImageFormat::Jpeg { quality: 10 }, None).expect("encodes");
        let large = encode(&frame, ImageFormat::Jpeg { quality: 100 }, None).expect("encodes");
        assert!(
            small.bytes.len() < large.bytes.len(),
            "{} < {}",
            small.bytes.len(),
            large.bytes.len()
        );
    }

    #[test]
    fn downscaling_reports_scale_factors() {
        let frame = checkerboard(128, 80);
        let image =
            encode(&frame, ImageFormat::Jpeg { quality: 80 }, Some((64, 40))).expect("encodes");
        assert_eq!(
            (image.width, image.height, image.mime),
            (64, 40, "image/jpeg")
        );
        assert_eq!((image.screen_width, image.screen_height), (128, 80));
        assert_eq!((image.scale_x, image.scale_y), (2.0, 2.0));
        assert_eq!(image.to_screen(0.0, 0.0), (1, 1));
        assert_eq!(image.to_screen(10.0, 20.0), (21, 41));
        assert_eq!(image.to_screen(1000.0, -5.0), (127, 0));
        let (w, h, _) = decode_jpeg(&image.bytes);
        assert_eq!((w, h), (64, 40));
    }

    #[test]
    fn bad_targets_and_qualities_are_errors() {
        let frame = checkerboard(16, 16);
        assert!(matches!(
            encode(&frame, ImageFormat::Png, Some((0, 10))),
            Err(EncodeError::TargetSize { .. })
        ));
        assert!(matches!(
            encode(&frame, ImageFormat::Jpeg { quality: 0 }, None),
            Err(EncodeError::JpegQuality(0))
        ));
        let broken = Frame {
            width: 4,
            height: 4,
            pixels: vec![0; 3],
        };
        assert!(matches!(
            encode(&broken, ImageFormat::Png, None),
            Err(EncodeError::FrameSize { .. })
        ));
    }

    #[test]
    fn fitting_keeps_the_aspect_ratio() {
        assert_eq!(fit_within((1280, 800), (1024, 768)), (1024, 640));
        assert_eq!(fit_within((1280, 800), (1568, 1568)), (1280, 800));
        assert_eq!(fit_within((1920, 1080), (1280, 800)), (1280, 720));
        assert_eq!(fit_within((5000, 1), (100, 100)), (100, 1));
    }
}
