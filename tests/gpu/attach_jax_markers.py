"""Prints the text of every marker frame of a memwatch capture, one per line (a capture
still being written is read up to its last whole frame).
    attach_jax_markers.py CAPTURE"""
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
if data[:8] != b"MWCAP\0\r\n":
    sys.exit(f"{sys.argv[1]}: not a memwatch capture")
pos = 16
while pos + 9 <= len(data):
    (ln,) = struct.unpack_from("<I", data, pos)
    body = data[pos + 4: pos + 4 + ln]
    if len(body) < ln or pos + 8 + ln > len(data):
        break
    (crc,) = struct.unpack_from("<I", data, pos + 4 + ln)
    if zlib.crc32(body) == crc and body[0] == 4:  # marker := pid tid ts device text
        (n,) = struct.unpack_from("<H", body, 1 + 4 + 4 + 8 + 4)
        print(body[1 + 22: 1 + 22 + n].decode("utf-8", "replace"))
    pos += 8 + ln
