#!/usr/bin/env python3
"""Writes the named, hand-made seeds of the user-data fuzz corpora.

The rest of each corpus (files named by their SHA-1) is what libFuzzer found,
minimized with -set_cover_merge=1; see README.md.
"""
import gzip
import os

HERE = os.path.dirname(os.path.abspath(__file__))
V = os.path.join(HERE, "corpus", "user_data_validate")
M = os.path.join(HERE, "corpus", "user_data_merge")

KEY = b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti ca@example"
ECDSA = (b"ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBHwf2HMM5TRXvo2SQJjsNkiDD5KqiiNjrGVv3U"
         b"Uh+mMT5RHxiRtOnlqvjhQtBq0VpmpCV/PwUdhOig4vkbqAcEc= ecdsa@example")
MP = (b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n\npreamble\n"
      b"--XYZ\nContent-Type: text/x-shellscript\nContent-Disposition: attachment; filename=\"a.sh\"\n\n#!/bin/sh\necho a\n\n"
      b"--XYZ\n\n#cloud-config\nruncmd: [ls]\n"
      b"--XYZ\nContent-Type: text/plain\nContent-Transfer-Encoding: base64\n\nIyEvYmluL3NoCg==\n"
      b"--XYZ\nContent-Type: text/plain\nContent-Transfer-Encoding: quoted-printable\n\n=23cloud-config=\n\n"
      b"--XYZ--\nepilogue\n")

VALIDATE = {
    "cloud-config": b"#cloud-config\npackages: [htop]\n",
    "script": b"#!/bin/sh\necho hi\n",
    "boothook": b"#cloud-boothook\n#!/bin/sh\n",
    "part-handler": b"#part-handler\ndef list_types(): return []\n",
    "include": b"#include\nhttp://example.invalid/x\n",
    "include-once": b"#include-once\n",
    "archive": b"#cloud-config-archive\n- content: '#cloud-config'\n",
    "jsonp": b"#cloud-config-jsonp\n[]\n",
    "jinja": b"## template: jinja\n#cloud-config\n",
    "per-boot": b"text/x-shellscript-per-boot\n",
    "ws-case": b" \t\n\x1c#CLOUD-config\r\n",
    "kelvin": "#cloud-boothoo\u212a\n".encode(),
    "multipart": MP,
    "multipart-ct-first": MP.replace(b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n",
                                     b"Content-Type: multipart/mixed; boundary=XYZ\nMIME-Version: 1.0\n"),
    "multipart-crlf": MP.replace(b"\n", b"\r\n"),
    "multipart-nested": (b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=o\n\n--o\n"
                         b"Content-Type: multipart/alternative; boundary=\"i\"\n\n--i\n\n#!/bin/sh\n--i--\n"
                         b"--o\nContent-Type: application/gzip\n\nxx\n--o--\n"),
    "multipart-digest": (b"MIME-Version: 1.0\nContent-Type: multipart/digest; boundary=d\n\n--d\n"
                         b"Content-Type: text/x-shellscript\n\n#!/bin/sh\n--d--\n"),
    "message-rfc822": b"MIME-Version: 1.0\nContent-Type: message/rfc822\n\nSubject: x\n\n#!/bin/sh\n",
    "uuencode": b"MIME-Version: 1.0\nContent-Transfer-Encoding: x-uuencode\n\nbegin 644 x\n`\nend\n",
    "no-boundary": b"MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--b\n\n#!\n--b--\n",
    "truncated": b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\n#!/bin/sh\n",
    "untyped": b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\nhello\n--b--\n",
    "mime-single": b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\n\n#!/bin/sh\n",
    "mime-mention": b"#!/bin/sh\necho MIME-Version: 1.0\n",
    "mime-from": b"From x\nMIME-Version: 1.0\nFrom y\n\n#!/bin/sh\r",
    "rfc2231": b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary*=utf-8''b\n\n--b\n",
    "quoted-params": (b"mime-version: 1.0\ncontent-type: multipart/mixed; x=\"a;b\"; boundary=<q\\\"z>\n\n"
                      b"--q\"z\n\n#!\n--q\"z--\n"),
    "plain": b"hello world\n",
    "utf8": "#!/bin/sh\necho \u00e9\u20ac\n".encode(),
    "invalid-utf8": b"#!/bin/sh\n\xff\xfe\n",
    "mime-invalid-utf8": b"MIME-Version: 1.0\n\n#!/bin/sh\n\xff",
    "gzip": gzip.compress(b"#!/bin/sh\necho gz\n", mtime=0),
    "cr-only": b"#!/bin/sh\recho cr\r",
    "header-only-from": b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\nFrom x\n",
    "header-only-from-cr": b"MIME-Version: 1.0\rContent-Type: text/x-shellscript\rFrom x\r",
}

MERGE = {
    "fixed-script": b"#!/bin/sh\necho hi\n",
    "fixed-multipart": MP,
    "key-script": KEY + b"\n\x00#!/bin/sh\n",
    "ecdsa-multipart-crlf": ECDSA + b"\x00" + MP.replace(b"\n", b"\r\n"),
    "key-empty-user-data": KEY + b"\x00",
    "key-tricky-comment": KEY[:-10] + b" yes: 0644 # 'x' \"y\" &a *b {c} [d] | >\x00#cloud-config\n",
    "key-utf8-comment": KEY + " jos\u00e9".encode() + b"\x00#cloud-config\n",
    "key-and-yaml": KEY + b"\nruncmd: [reboot]\x00#!/bin/sh\n",
    "private-key": b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n\x00#!/bin/sh\n",
    "garbage-key": b"not a key\x00#!/bin/sh\n",
    "gzip-with-key": KEY + b"\x00" + gzip.compress(b"#!/bin/sh\n", mtime=0),
    "boundary-collision": b"#!/bin/sh\necho --==unikorn-user-data-0==\n",
    "mime-single": b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\n\n#!/bin/sh\r",
    "cr-only": b"#!/bin/sh\recho cr\r",
    "non-ascii": "#!/bin/sh\necho \u00e9\u20ac\U0001F600\n".encode(),
    "header-only-from": b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\nFrom x\n",
}

for directory, seeds in ((V, VALIDATE), (M, MERGE)):
    os.makedirs(directory, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(directory, "seed-" + name), "wb") as f:
            f.write(data)
