//! Server-sent events, as the WHATWG HTML standard defines the `text/event-stream` format:
//! lines end with LF, CR LF or CR; `field: value`; a blank line dispatches the event; lines
//! starting with `:` are comments. Bytes are fed as they arrive; a line (and so a UTF-8
//! character) may be split across any number of chunks. Memory is bounded: an event larger
//! than the limit is a malformed stream.

use super::ModelError;

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// The largest event (its buffered line plus its data) a parser accepts: 8 MiB.
pub const MAX_EVENT_BYTES: usize = 8 << 20;

/// An incremental `text/event-stream` parser.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended with CR: a LF at the start of the next one belongs to it.
    after_cr: bool,
    /// The `event:` field of the event being read (reused across events).
    event: String,
    has_event: bool,
    data: String,
    has_data: bool,
    started: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feeds bytes; appends every event they complete to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ModelError> {
        self.feed_with(bytes, |event, data| {
            out.push(SseEvent {
                event: event.map(str::to_owned),
                data: data.to_owned(),
            });
            Ok(())
        })
    }

    /// Feeds bytes; calls `on_event(event, data)` for every event they complete, in order,
    /// without copying the event (the hot path of a model stream). An error from `on_event`
    /// stops the feed and is returned.
    pub fn feed_with(
        &mut self,
        mut bytes: &[u8],
        mut on_event: impl FnMut(Option<&str>, &str) -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(b'\n') = bytes.first() {
                bytes = &bytes[1..];
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', bytes) {
            let cr = bytes[i] == b'\r';
            if self.line.is_empty() {
                // The whole line is in this chunk: no copy.
                self.line_done(&bytes[..i], &mut on_event)?;
            } else {
                self.line.extend_from_slice(&bytes[..i]);
                let line = std::mem::take(&mut self.line);
                let r = self.line_done(&line, &mut on_event);
                self.line = line;
                self.line.clear();
                r?;
            }
            bytes = &bytes[i + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(ModelError::BadResponse(format!(
                "an event of the stream exceeds {MAX_EVENT_BYTES} bytes"
            )));
        }
        Ok(())
    }

    /// Whether a partial line or an undispatched event is buffered (a stream that ends here
    /// was cut off mid-event).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    fn line_done(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(Option<&str>, &str) -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        let mut line = line;
        if !self.started {
            self.started = true;
            // A UTF-8 byte order mark at the start of the stream is ignored.
            if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = rest;
            }
        }
        if line.is_empty() {
            let r = if self.has_data {
                on_event(self.has_event.then_some(self.event.as_str()), &self.data)
            } else {
                Ok(())
            };
            self.has_event = false;
            self.data.clear();
            self.has_data = false;
            return r;
        }
        if line[0] == b':' {
            return Ok(());
        }
        let text = std::str::from_utf8(line)
            .map_err(|_| ModelError::BadResponse("the stream is not valid UTF-8".into()))?;
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                if self.data.len() > MAX_EVENT_BYTES {
                    return Err(ModelError::BadResponse(format!(
                        "an event of the stream exceeds {MAX_EVENT_BYTES} bytes"
                    )));
                }
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
                self.has_event = true;
            }
            // `id` and `retry` concern reconnection, which model streams do not use.
            _ => {}
        }
        Ok(())
    }
}
