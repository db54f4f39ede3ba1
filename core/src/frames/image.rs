//! Image evidence intake: strict base64, the PNG / JPEG / WebP signatures, the size limit, and
//! the SHA-256 address. A mislabelled or oversized image changes nothing.

use super::FramesError;
use super::validate::sha256_hex;

/// Largest accepted image, in bytes (256 KiB).
pub const MAX_IMAGE_BYTES: usize = 256 * 1024;

/// The image MIME types accepted as evidence.
pub const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/webp"];

/// A validated image: its bytes, declared type and SHA-256 address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageBlob {
    pub mime_type: String,
    pub sha256: String,
    pub bytes: Vec<u8>,
}

/// Decodes and checks an uploaded image: base64 must be canonical standard base64, the bytes
/// nonempty and at most [`MAX_IMAGE_BYTES`], and the file signature must match the declared
/// type. Every refusal is `INVALID_IMAGE` (422), as the reference ThreadDesk server answers.
pub fn decode_image(mime_type: &str, data_base64: &str) -> Result<ImageBlob, FramesError> {
    if !IMAGE_TYPES.contains(&mime_type) {
        return Err(FramesError::InvalidImage(format!(
            "image type `{mime_type}` is not one of {IMAGE_TYPES:?}"
        )));
    }
    // Reject before decoding anything that could not fit.
    if data_base64.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
        return Err(FramesError::InvalidImage(format!(
            "images are limited to {MAX_IMAGE_BYTES} bytes"
        )));
    }
    let bytes = base64_decode(data_base64).ok_or_else(|| {
        FramesError::InvalidImage("data_base64 is not valid standard base64".into())
    })?;
    if bytes.is_empty() {
        return Err(FramesError::InvalidImage("the image is empty".into()));
    }
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(FramesError::InvalidImage(format!(
            "the image has {} bytes; the limit is {MAX_IMAGE_BYTES}",
            bytes.len()
        )));
    }
    let actual = sniff(&bytes);
    if actual != Some(mime_type) {
        return Err(FramesError::InvalidImage(format!(
            "declared {mime_type}, but the bytes are {}",
            actual.unwrap_or("not a PNG, JPEG or WebP image")
        )));
    }
    Ok(ImageBlob {
        mime_type: mime_type.to_owned(),
        sha256: sha256_hex(&bytes),
        bytes,
    })
}

/// The image type a file signature announces.
pub fn sniff(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if b.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Standard base64 (RFC 4648 §4) with required padding; no whitespace, no URL alphabet.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (i, chunk) in b.chunks(4).enumerate() {
        let last = i == b.len() / 4 - 1;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | val(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        // Canonical encoding: the bits beyond the data must be zero.
        if (pad == 1 && bytes[2] != 0) || (pad == 2 && (bytes[1] != 0 || bytes[2] != 0)) {
            return None;
        }
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mP8/x8AAwMCAO+/l6cAAAAASUVORK5CYII=";

    #[test]
    fn base64_round_trips_and_rejects_noise() {
        for n in 0..10 {
            let data: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(base64_decode(&base64_encode(&data)).unwrap(), data);
        }
        assert_eq!(base64_decode("aGk="), Some(b"hi".to_vec()));
        assert!(base64_decode("aGk").is_none());
        assert!(base64_decode("aG k=").is_none());
        assert!(
            base64_decode("aGl=").is_none(),
            "non-canonical trailing bits"
        );
        assert!(base64_decode("a=Gk").is_none());
    }

    #[test]
    fn images_are_checked_by_signature_and_size() {
        let png = decode_image("image/png", PNG).unwrap();
        assert_eq!(png.bytes.len(), 68);
        assert_eq!(png.sha256.len(), 64);
        assert_eq!(
            decode_image("image/jpeg", PNG).unwrap_err().code(),
            "INVALID_IMAGE"
        );
        assert_eq!(
            decode_image("image/gif", PNG).unwrap_err().code(),
            "INVALID_IMAGE"
        );
        let mut big = base64_decode(PNG).unwrap();
        big.resize(MAX_IMAGE_BYTES + 1, 0);
        assert_eq!(
            decode_image("image/png", &base64_encode(&big))
                .unwrap_err()
                .code(),
            "INVALID_IMAGE"
        );
        big.truncate(MAX_IMAGE_BYTES);
        assert!(decode_image("image/png", &base64_encode(&big)).is_ok());
        assert_eq!(
            decode_image("image/png", "!!!!").unwrap_err().code(),
            "INVALID_IMAGE"
        );
    }
}
