package policy

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Credential mechanisms: what kind of secret a place holds. Reports and violations carry these names.
const (
	CredSSHKey      = "ssh private key"
	CredCloud       = "cloud credentials"
	CredRegistry    = "container or package registry token"
	CredGit         = "git credentials"
	CredNetrc       = "netrc"
	CredKubernetes  = "kubernetes config"
	CredHistory     = "shell history"
	CredBrowser     = "browser profile"
	CredWallet      = "crypto wallet"
	CredEnvFile     = "env file"
	CredKeyring     = "kernel keyring"
	CredExfiltrated = "exfiltration of a decoy value"
)

// CredentialPlace is one row of the credential table: a file below a home directory where a secret
// lives, and how its decoy looks. The decoy holds values unique to the run (Decoy.Token is one of them,
// the one looked for in what the command sends or leaves).
type CredentialPlace struct {
	Rel       string // below the home directory
	Mechanism string
	make      func(token string) []byte
	hexToken  bool // the token must look like hex there
	// ReadByTools: ordinary tools read the file on every start (npm its .npmrc, bash its history, git
	// and curl a .netrc, docker its config.json): a read is no finding, only where its value goes.
	ReadByTools bool
}

// CredentialPlaces is the one table of places where secrets live (documented in docs/profiles.md,
// section "Credentials"). The sandbox shows a decoy in each of them below every hidden home directory (the
// sandbox's HOME, root's and the caller's), never inside the working tree or a share.
var CredentialPlaces = []CredentialPlace{
	{".ssh/id_ed25519", CredSSHKey, func(t string) []byte { return opensshKey(t, 3) }, false, false},
	{".ssh/id_rsa", CredSSHKey, func(t string) []byte { return opensshKey(t, 24) }, false, false},
	{".ssh/id_ecdsa", CredSSHKey, func(t string) []byte { return opensshKey(t, 5) }, false, false},
	{".aws/credentials", CredCloud, func(t string) []byte {
		return fmt.Appendf(nil, "[default]\naws_access_key_id = AKIA%s\naws_secret_access_key = %s%s\n", upperAlnum(16), t, alnum(8))
	}, false, false},
	{".config/gcloud/application_default_credentials.json", CredCloud, func(t string) []byte {
		return fmt.Appendf(nil, "{\n  \"client_id\": \"%s.apps.googleusercontent.com\",\n  \"client_secret\": \"GOCSPX-%s\",\n  \"refresh_token\": \"1//0%s\",\n  \"type\": \"authorized_user\"\n}\n", digits(12), alnum(28), t)
	}, false, false},
	{".azure/accessTokens.json", CredCloud, func(t string) []byte {
		return fmt.Appendf(nil, "[{\"tokenType\": \"Bearer\", \"expiresIn\": 3599, \"accessToken\": \"eyJ0eXAiOiJKV1Qi%s\", \"refreshToken\": \"%s\"}]\n", alnum(40), t)
	}, false, false},
	{".docker/config.json", CredRegistry, func(t string) []byte {
		return fmt.Appendf(nil, "{\n\t\"auths\": {\n\t\t\"https://index.docker.io/v1/\": {\n\t\t\t\"auth\": \"%s\"\n\t\t}\n\t}\n}\n", base64.StdEncoding.EncodeToString([]byte("builder:dckr_pat_"+t)))
	}, false, true},
	{".npmrc", CredRegistry, func(t string) []byte { return fmt.Appendf(nil, "//registry.npmjs.org/:_authToken=npm_%s\n", t) }, false, true},
	{".pypirc", CredRegistry, func(t string) []byte {
		return fmt.Appendf(nil, "[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmc%s\n", t)
	}, false, false},
	{".cargo/credentials.toml", CredRegistry, func(t string) []byte { return fmt.Appendf(nil, "[registry]\ntoken = \"cio%s\"\n", t) }, false, false},
	{".netrc", CredNetrc, func(t string) []byte {
		return fmt.Appendf(nil, "machine github.com\n  login builder\n  password ghp_%s\n", t)
	}, false, true},
	{".git-credentials", CredGit, func(t string) []byte { return fmt.Appendf(nil, "https://builder:ghp_%s@github.com\n", t) }, false, false},
	{".config/gh/hosts.yml", CredGit, func(t string) []byte {
		return fmt.Appendf(nil, "github.com:\n    oauth_token: gho_%s\n    user: builder\n    git_protocol: https\n", t)
	}, false, false},
	{".kube/config", CredKubernetes, func(t string) []byte {
		return fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://10.96.0.1:6443\n  name: prod\ncontexts:\n- context:\n    cluster: prod\n    user: admin\n  name: prod\ncurrent-context: prod\nusers:\n- name: admin\n  user:\n    token: %s\n", t)
	}, false, false},
	{".bash_history", CredHistory, func(t string) []byte {
		return fmt.Appendf(nil, "ls\ncd src\nexport GITHUB_TOKEN=ghp_%s\ngit push\n", t)
	}, false, true},
	{".zsh_history", CredHistory, func(t string) []byte {
		return fmt.Appendf(nil, ": 1700000000:0;export OPENAI_API_KEY=sk-%s\n: 1700000042:0;make\n", t)
	}, false, true},
	{".config/google-chrome/Default/Login Data", CredBrowser, func(t string) []byte { return sqliteLike(t) }, false, false},
	{".mozilla/firefox/profiles.ini", CredBrowser, func(t string) []byte {
		return []byte("[Profile0]\nName=default-release\nIsRelative=1\nPath=" + strings.ToLower(alnum(8)) + ".default-release\nDefault=1\n\n[General]\nStartWithLastProfile=1\nVersion=2\n")
	}, false, false},
	{".bitcoin/wallet.dat", CredWallet, func(t string) []byte { return sqliteLike(t) }, false, false},
	{".ethereum/keystore/key.json", CredWallet, func(t string) []byte {
		return fmt.Appendf(nil, "{\"address\":\"%s\",\"crypto\":{\"cipher\":\"aes-128-ctr\",\"ciphertext\":\"%s\",\"kdf\":\"scrypt\",\"mac\":\"%s\"},\"version\":3}\n", hexN(20), t, hexN(32))
	}, true, false},
	{".env", CredEnvFile, func(t string) []byte {
		return fmt.Appendf(nil, "DATABASE_URL=postgres://app:%s@db.internal:5432/app\nSTRIPE_SECRET_KEY=sk_live_%s\n", alnum(20), t)
	}, false, false},
}

// NewToken is a decoy's run-unique value: 32 letters and digits, which survive a DNS label (lower-cased)
// and no encoding of a real key would need escaping.
func NewToken() string { return alnum(32) }

const alnumChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func pick(n int, from string) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = from[int(b[i])%len(from)]
	}
	return string(b)
}

func alnum(n int) string      { return pick(n, alnumChars) }
func upperAlnum(n int) string { return pick(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") }
func digits(n int) string     { return pick(n, "0123456789") }

func hexN(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// opensshKey is an OpenSSH private key's shape: its armour, the format's magic in the base64 body, and
// lines of 70 characters; the token is a run of the body's characters.
func opensshKey(token string, lines int) []byte {
	body := make([]byte, lines*52)
	rand.Read(body)
	copy(body, "openssh-key-v1\x00")
	enc := base64.StdEncoding.EncodeToString(body)
	enc = enc[:40] + token + enc[40+len(token):]
	var b strings.Builder
	b.WriteString("-----BEGIN OPENSSH PRIVATE KEY-----\n")
	for len(enc) > 70 {
		b.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	b.WriteString(enc + "\n-----END OPENSSH PRIVATE KEY-----\n")
	return []byte(b.String())
}

// sqliteLike is a small SQLite-shaped file (the browsers' and wallets' own format), the token in it.
func sqliteLike(token string) []byte {
	b := make([]byte, 8192)
	rand.Read(b)
	copy(b, "SQLite format 3\x00")
	copy(b[100:], token)
	return b
}

// NewDecoy makes a decoy for place: its content and the run-unique value in it that is looked for in
// what the command sends or leaves.
func NewDecoy(p CredentialPlace) (content []byte, token string) {
	token = NewToken()
	if p.hexToken {
		token = hexN(16)
	}
	return p.make(token), token
}
