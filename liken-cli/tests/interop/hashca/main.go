// Command hashca is the Go side of liken's token hash test: for each file
// named on the command line it prints the hash a k3s token carries for
// that CA bundle, worked out with Go's own crypto/x509 as k3s does it
// (k3s pkg/clientaccess/token.go, hashCA).
//
// The rule: a file with one certificate is hashed as it is, byte for
// byte. With several, the first is verified against the others, where
// one without an authority key id (or naming its own key) is a root and
// any other an intermediate; when that verifies, the first chain's root
// is hashed (its DER), and otherwise the file's bytes are.
package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
)

func main() {
	for _, name := range os.Args[1:] {
		data, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sum, err := caHash(data)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		fmt.Println(sum)
	}
}

// parse returns the certificates of the CERTIFICATE blocks without
// headers, skipping any other block, as client-go's certutil does.
func parse(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			break
		}
		data = rest
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no certificate")
	}
	return certs, nil
}

func caHash(data []byte) (string, error) {
	certs, err := parse(data)
	if err != nil {
		return "", err
	}
	hashed := data
	if len(certs) > 1 {
		roots := x509.NewCertPool()
		intermediates := x509.NewCertPool()
		for _, c := range certs[1:] {
			selfNamed := bytes.Equal(c.AuthorityKeyId, c.SubjectKeyId)
			if len(c.AuthorityKeyId) == 0 || selfNamed {
				roots.AddCert(c)
			} else {
				intermediates.AddCert(c)
			}
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: intermediates}
		if chains, err := certs[0].Verify(opts); err == nil {
			first := chains[0]
			hashed = first[len(first)-1].Raw
		}
	}
	sum := sha256.Sum256(hashed)
	return hex.EncodeToString(sum[:]), nil
}
