//! Certificates made with `openssl` for one test: a CA, a server certificate for 127.0.0.1
//! and localhost, a client certificate, and a certificate for both ends as Envoy Gateway's
//! are made (no extended key usage: its rate limit pod serves gRPC and dials the control
//! plane with one), in a temp directory removed on drop.

use std::path::PathBuf;
use std::process::Command;

use super::server::TempConfig;

/// A CA and the certificates it signed (`ca.crt`, `server.crt`/`.key`, `client.crt`/`.key`,
/// `both.crt`/`.key`).
pub struct Pki {
    dir: TempConfig,
}

impl Pki {
    pub fn make() -> Pki {
        let dir = TempConfig::new("");
        let pki = Pki { dir };
        let ext = pki.path("san.ext");
        std::fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .expect("ext");
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=tollgate test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        // Extensions make v3 certificates (rustls refuses v1).
        std::fs::write(pki.path("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
        std::fs::write(
            pki.path("both.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nkeyUsage=digitalSignature,keyEncipherment\n",
        )
        .expect("ext");
        for (name, ext) in [
            ("server", "san.ext"),
            ("client", "client.ext"),
            ("both", "both.ext"),
        ] {
            pki.openssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ]);
            let args = vec![
                "x509".to_string(),
                "-req".into(),
                "-in".into(),
                format!("{name}.csr"),
                "-CA".into(),
                "ca.crt".into(),
                "-CAkey".into(),
                "ca.key".into(),
                "-CAcreateserial".into(),
                "-days".into(),
                "2".into(),
                "-out".into(),
                format!("{name}.crt"),
                "-extfile".into(),
                ext.into(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            pki.openssl(&args);
        }
        pki
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir.dir)
            .output()
            .expect("openssl is needed for the TLS tests (Debian: apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.dir.join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read pem")
    }
}
