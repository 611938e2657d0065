//! MIME multipart user data (what cloud-init and nodeadm read on AL2 and AL2023): the user's
//! own `spec.userData` split into its parts, and parts joined into one document.

use super::UserDataError;

const BOUNDARY: &str = "//";

/// `(content type, body)` of each part of the user's own user data. A document that is not
/// multipart is one part: a NodeConfig if it is one, else a shell script.
pub fn parts(custom: &str) -> Result<Vec<(String, String)>, UserDataError> {
    let header_end = custom.find("\n\n").or_else(|| custom.find("\r\n\r\n"));
    let is_mime = custom
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .any(|l| {
            l.to_ascii_lowercase()
                .starts_with("content-type: multipart/")
        });
    if !is_mime {
        let kind = if custom.contains("kind: NodeConfig") {
            "application/node.eks.aws"
        } else {
            "text/x-shellscript; charset=\"us-ascii\""
        };
        return Ok(vec![(kind.to_string(), custom.to_string())]);
    }
    let header = &custom[..header_end.unwrap_or(custom.len())];
    let boundary = header
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| {
            b.lines()
                .next()
                .unwrap_or_default()
                .trim()
                .trim_matches('"')
        })
        .filter(|b| !b.is_empty())
        .ok_or(UserDataError::NoBoundary)?;
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in custom.split(delimiter.as_str()).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        let chunk = chunk.trim_start_matches(['\r', '\n']);
        let (head, body) = chunk
            .split_once("\n\n")
            .or_else(|| chunk.split_once("\r\n\r\n"))
            .unwrap_or(("", chunk));
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "text/x-shellscript".to_string());
        parts.push((content_type, body.trim_end().to_string()));
    }
    Ok(parts)
}

/// The user's parts first (as upstream merges them), then jointer's `own` part.
pub fn merge(custom: Option<&str>, own: (&str, String)) -> Result<String, UserDataError> {
    let mut all = match custom {
        Some(c) => parts(c)?,
        None => Vec::new(),
    };
    all.push((own.0.to_string(), own.1));
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for (content_type, body) in all {
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {content_type}\n\n{}\n\n",
            body.trim_end()
        ));
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_parts_come_first_and_a_boundary_is_required() {
        let custom = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUND\"\n\n--BOUND\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n--BOUND--\n";
        let data = merge(Some(custom), ("text/plain", "mine".into())).unwrap();
        assert!(data.find("echo hi").unwrap() < data.find("mine").unwrap());
        assert_eq!(data.matches("--//\n").count(), 2);
        let bad = "Content-Type: multipart/mixed\n\n--x\n\nbody\n";
        assert_eq!(parts(bad), Err(UserDataError::NoBoundary));
        assert_eq!(
            parts("echo plain").unwrap()[0].0,
            "text/x-shellscript; charset=\"us-ascii\""
        );
    }
}
