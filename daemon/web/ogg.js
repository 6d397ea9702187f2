// ogg.js - a small Ogg Opus writer and reader for the page (RFC 3533,
// RFC 7845), written for moshid: no libogg, no dependencies.
//
// OggOpusWriter makes the pages the page sends: OpusHead (BOS, granule 0),
// OpusTags (granule 0), then one page per audio packet, granule positions in
// 48 kHz samples (pre-skip included), CRCs computed.
// OggReader takes the payloads of kind-1 messages as they come (a page may be
// split across messages) and returns the packets of complete pages; pages
// with a bad CRC or a broken structure are counted and skipped (the server's
// output is trusted less than nothing, more than garbage).

// ---- CRC (polynomial 0x04c11db7, no reflection, initial value 0) ----------
const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let r = i << 24;
    for (let j = 0; j < 8; j++) r = r & 0x80000000 ? (r << 1) ^ 0x04c11db7 : r << 1;
    t[i] = r >>> 0;
  }
  return t;
})();

/** Ogg CRC-32 of bytes (a Uint8Array), as an unsigned number. */
export function oggCrc(bytes) {
  let crc = 0;
  for (let i = 0; i < bytes.length; i++) crc = ((crc << 8) ^ CRC_TABLE[((crc >>> 24) ^ bytes[i]) & 0xff]) >>> 0;
  return crc;
}

export const OGG_CONTINUED = 0x01;
export const OGG_BOS = 0x02;
export const OGG_EOS = 0x04;
const OGG_HEADER_BYTES = 27;
const OGG_MAX_SEGMENTS = 255;
// Most bytes the reader holds while waiting for the rest of a page: a page is
// at most 27 + 255 + 255 * 255 bytes.
const OGG_MAX_PAGE_BYTES = OGG_HEADER_BYTES + OGG_MAX_SEGMENTS + OGG_MAX_SEGMENTS * 255;
// Largest packet the reader reassembles across pages, bytes.
const OGG_MAX_PACKET_BYTES = 1 << 16;

/**
 * One Ogg page holding whole packets (Uint8Arrays). granule: a non-negative
 * integer below 2^53; flags: OGG_BOS / OGG_EOS. Returns a Uint8Array.
 */
export function oggPage(serial, seq, granule, packets, flags = 0) {
  const lacing = [];
  let body = 0;
  for (const p of packets) {
    for (let n = p.length; ; n -= 255) {
      lacing.push(Math.min(n, 255));
      if (n < 255) break;
    }
    body += p.length;
  }
  if (lacing.length > OGG_MAX_SEGMENTS) throw new Error(`ogg: ${lacing.length} segments do not fit one page`);
  const page = new Uint8Array(OGG_HEADER_BYTES + lacing.length + body);
  const dv = new DataView(page.buffer);
  page.set([0x4f, 0x67, 0x67, 0x53]); // "OggS"
  page[4] = 0; // version
  page[5] = flags;
  dv.setUint32(6, granule % 0x100000000, true);
  dv.setUint32(10, Math.floor(granule / 0x100000000), true);
  dv.setUint32(14, serial >>> 0, true);
  dv.setUint32(18, seq >>> 0, true);
  dv.setUint32(22, 0, true); // CRC, filled below
  page[26] = lacing.length;
  page.set(lacing, OGG_HEADER_BYTES);
  let at = OGG_HEADER_BYTES + lacing.length;
  for (const p of packets) {
    page.set(p, at);
    at += p.length;
  }
  dv.setUint32(22, oggCrc(page), true);
  return page;
}

const enc = new TextEncoder();

/** The OpusHead packet (RFC 7845 5.1): version 1, mapping family 0. */
export function opusHead(channels, preSkip48, inputRate, gainQ8 = 0) {
  const p = new Uint8Array(19);
  const dv = new DataView(p.buffer);
  p.set(enc.encode("OpusHead"));
  p[8] = 1;
  p[9] = channels;
  dv.setUint16(10, preSkip48, true);
  dv.setUint32(12, inputRate, true);
  dv.setInt16(16, gainQ8, true);
  p[18] = 0;
  return p;
}

/** The OpusTags packet (RFC 7845 5.2): a vendor string, no comments. */
export function opusTags(vendor) {
  const v = enc.encode(vendor);
  const p = new Uint8Array(8 + 4 + v.length + 4);
  const dv = new DataView(p.buffer);
  p.set(enc.encode("OpusTags"));
  dv.setUint32(8, v.length, true);
  p.set(v, 12);
  dv.setUint32(12 + v.length, 0, true);
  return p;
}

/** Parsed OpusHead, or null when the packet is not one. */
export function parseOpusHead(p) {
  if (p.length < 19 || new TextDecoder().decode(p.subarray(0, 8)) !== "OpusHead") return null;
  const dv = new DataView(p.buffer, p.byteOffset, p.byteLength);
  return { version: p[8], channels: p[9], preSkip: dv.getUint16(10, true), inputRate: dv.getUint32(12, true),
    gainQ8: dv.getInt16(16, true), family: p[18] };
}

/** True when the packet begins with "OpusTags". */
export function isOpusTags(p) {
  return p.length >= 8 && new TextDecoder().decode(p.subarray(0, 8)) === "OpusTags";
}

/**
 * Duration of an Opus packet in 48 kHz samples, from its TOC byte
 * (RFC 6716 3.1); 0 for an empty or malformed packet.
 */
export function opusPacketSamples48(p) {
  if (!p.length) return 0;
  const config = p[0] >> 3, code = p[0] & 3;
  let frame; // 48 kHz samples per frame
  if (config < 12) frame = [480, 960, 1920, 2880][config & 3];        // SILK: 10, 20, 40, 60 ms
  else if (config < 16) frame = [480, 960][config & 1];               // hybrid: 10, 20 ms
  else frame = [120, 240, 480, 960][config & 3];                      // CELT: 2.5, 5, 10, 20 ms
  let frames = code === 0 ? 1 : code === 3 ? (p.length > 1 ? p[1] & 0x3f : 0) : 2;
  return frame * frames;
}

/**
 * Writes one Ogg Opus stream: header pages, then one page per audio packet.
 * The serial is random; granule positions count 48 kHz samples.
 */
export class OggOpusWriter {
  constructor({ channels = 1, preSkip48 = 312, inputRate = 24000, vendor = "moshid-web" } = {}) {
    const r = new Uint32Array(1);
    crypto.getRandomValues(r);
    this.serial = r[0];
    this.seq = 0;
    this.granule = 0;
    this.head = { channels, preSkip48, inputRate, vendor };
  }

  /** The two header pages (OpusHead with BOS, OpusTags), granule 0. */
  headerPages() {
    const h = this.head;
    return [
      oggPage(this.serial, this.seq++, 0, [opusHead(h.channels, h.preSkip48, h.inputRate)], OGG_BOS),
      oggPage(this.serial, this.seq++, 0, [opusTags(h.vendor)]),
    ];
  }

  /** A page holding the given audio packets; the granule advances by their duration. */
  audioPage(packets) {
    for (const p of packets) this.granule += opusPacketSamples48(p);
    return oggPage(this.serial, this.seq++, this.granule, packets);
  }
}

/**
 * Reads an Ogg stream fed in any chunking. feed(bytes) returns the packets
 * completed by those bytes: [{data, granule, pageSeq}]. Counters: pages,
 * badPages (bad CRC or structure: skipped, the reader resynchronises on the
 * next "OggS"), skippedBytes.
 */
export class OggReader {
  constructor() {
    this.buf = new Uint8Array(0);
    this.partial = []; // pieces of a packet continued on the next page
    this.partialBytes = 0;
    this.pages = 0;
    this.badPages = 0;
    this.skippedBytes = 0;
  }

  feed(bytes) {
    const b = new Uint8Array(this.buf.length + bytes.length);
    b.set(this.buf);
    b.set(bytes, this.buf.length);
    const out = [];
    let i = 0;
    for (;;) {
      const s = findOggS(b, i);
      if (s < 0) { // keep up to 3 bytes that may start "OggS"
        const keep = Math.max(i, b.length - 3);
        this.skippedBytes += keep - i;
        i = keep;
        break;
      }
      this.skippedBytes += s - i;
      i = s;
      if (b.length - i < OGG_HEADER_BYTES) break;
      const nseg = b[i + 26];
      if (b.length - i < OGG_HEADER_BYTES + nseg) break;
      let body = 0;
      for (let k = 0; k < nseg; k++) body += b[i + OGG_HEADER_BYTES + k];
      const len = OGG_HEADER_BYTES + nseg + body;
      if (b.length - i < len) break;
      const page = b.subarray(i, i + len);
      if (!this._page(page, nseg, out)) { // not a page after all: look further
        this.badPages++;
        this.skippedBytes++;
        i++;
        continue;
      }
      i += len;
    }
    this.buf = b.slice(i);
    if (this.buf.length > OGG_MAX_PAGE_BYTES) { // cannot be a page: drop
      this.skippedBytes += this.buf.length;
      this.buf = new Uint8Array(0);
    }
    return out;
  }

  _page(page, nseg, out) {
    if (page[4] !== 0) return false;
    const dv = new DataView(page.buffer, page.byteOffset, page.byteLength);
    const want = dv.getUint32(22, true);
    const copy = page.slice();
    copy[22] = copy[23] = copy[24] = copy[25] = 0;
    if (oggCrc(copy) !== want) return false;
    this.pages++;
    const flags = page[5];
    const granule = dv.getUint32(6, true) + dv.getUint32(10, true) * 0x100000000;
    const pageSeq = dv.getUint32(18, true);
    // A continued page without the start of its packet (lost): drop the fragment.
    let drop = (flags & OGG_CONTINUED) !== 0 && this.partial.length === 0;
    if (!(flags & OGG_CONTINUED)) { this.partial = []; this.partialBytes = 0; }
    let at = OGG_HEADER_BYTES + nseg, start = at;
    for (let k = 0; k < nseg; k++) {
      const lace = page[OGG_HEADER_BYTES + k];
      at += lace;
      if (lace === 255) continue;
      const piece = page.subarray(start, at); // a packet (or its last piece) ends here
      start = at;
      if (drop) { drop = false; continue; }
      if (this.partial.length) {
        this.partial.push(piece);
        out.push({ data: concat(this.partial, this.partialBytes + piece.length), granule, pageSeq });
        this.partial = [];
        this.partialBytes = 0;
      } else {
        out.push({ data: piece.slice(), granule, pageSeq });
      }
    }
    if (start < at && !drop) { // the page ends inside a packet: keep its piece
      if (this.partialBytes + (at - start) <= OGG_MAX_PACKET_BYTES) {
        this.partial.push(page.slice(start, at));
        this.partialBytes += at - start;
      } else {
        this.partial = [];
        this.partialBytes = 0;
      }
    }
    return true;
  }
}

function findOggS(b, from) {
  for (let i = from; i + 4 <= b.length; i++)
    if (b[i] === 0x4f && b[i + 1] === 0x67 && b[i + 2] === 0x67 && b[i + 3] === 0x53) return i;
  return -1;
}

function concat(parts, n) {
  const o = new Uint8Array(n);
  let at = 0;
  for (const p of parts) { o.set(p, at); at += p.length; }
  return o;
}
