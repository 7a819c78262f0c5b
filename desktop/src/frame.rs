//! [`Frame`]: captured pixels (BGRX, as the X server holds them), and their conversion to the
//! RGB8 the encoders take.

/// A screenshot: `width * height` pixels, rows top to bottom without padding, 4 bytes per
/// pixel in **BGRX** order (blue, green, red, then an unspecified byte), as X servers hold a
/// 24-bit screen in memory on little-endian machines.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    pub width: u32,
    pub height: u32,
    /// BGRX bytes, `width * height * 4` of them.
    pub pixels: Vec<u8>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("width", &self.width)
            .field("height", &self.height)
            .field("bytes", &self.pixels.len())
            .finish()
    }
}

impl Frame {
    /// Bytes per pixel in [`Frame::pixels`].
    pub const BYTES_PER_PIXEL: usize = 4;

    /// The red, green and blue values of one pixel, or `None` outside the frame.
    pub fn rgb_at(&self, x: u32, y: u32) -> Option<[u8; 3]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = (y as usize * self.width as usize + x as usize) * Self::BYTES_PER_PIXEL;
        let px = self.pixels.get(i..i + 3)?;
        Some([px[2], px[1], px[0]])
    }

    /// The pixels as packed RGB8 (3 bytes per pixel), as PNG and JPEG encoders take them.
    pub fn to_rgb8(&self) -> Vec<u8> {
        bgrx_to_rgb(&self.pixels)
    }

    /// A fast 64-bit hash of the size and the visible pixels (the unspecified fourth byte of
    /// each pixel is ignored), to tell whether two frames differ. Not cryptographic.
    pub fn fingerprint(&self) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        const MASK: u64 = 0x00ff_ffff_00ff_ffff;
        // Four independent lanes over 32-byte blocks keep the multiplier pipelines busy.
        let mut lanes = [K, K ^ 1, K ^ 2, K ^ 3];
        let mut blocks = self.pixels.chunks_exact(32);
        for block in &mut blocks {
            for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(word);
                *lane = (*lane ^ (u64::from_le_bytes(bytes) & MASK))
                    .wrapping_mul(K)
                    .rotate_left(29);
            }
        }
        let mut hash = u64::from(self.width) << 32 | u64::from(self.height);
        for px in blocks.remainder().chunks(4) {
            for &b in px.iter().take(3) {
                hash = (hash ^ u64::from(b)).wrapping_mul(K);
            }
        }
        for lane in lanes {
            hash = (hash ^ lane).wrapping_mul(K).rotate_left(31);
        }
        hash
    }
}

/// Packs BGRX pixels as RGB8.
pub(crate) fn bgrx_to_rgb(bgrx: &[u8]) -> Vec<u8> {
    let mut rgb = vec![0u8; bgrx.len() / 4 * 3];
    for (out, px) in rgb.chunks_exact_mut(3).zip(bgrx.chunks_exact(4)) {
        out[0] = px[2];
        out[1] = px[1];
        out[2] = px[0];
    }
    rgb
}
