package testserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Each server installs into a folder of the user's cache of its own,
// named after its embedded files, the same every time.
func TestInstallDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	seen := map[string]Kind{}
	for _, kind := range []Kind{Dynalite, DynamoDBLocal} {
		dir, err := InstallDir(kind)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(cache, "ddblock", launcherOf[kind].dir+"-"); !strings.HasPrefix(dir, want) || len(dir) != len(want)+12 {
			t.Errorf("InstallDir(%s) = %s; want %s followed by 12 hex digits", kind, dir, want)
		}
		if again, _ := InstallDir(kind); again != dir {
			t.Errorf("InstallDir(%s) = %s, then %s", kind, dir, again)
		}
		if other, ok := seen[dir]; ok {
			t.Errorf("%s and %s share %s", kind, other, dir)
		}
		seen[dir] = kind
	}
	if _, err := InstallDir("postgres"); err == nil {
		t.Error("InstallDir(postgres): no error")
	}
}

// A server that cannot start says in one line what it needs.
func TestStartSaysWhatItNeeds(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the tests need Node.js: %v", err)
	}
	onlyNode := t.TempDir()
	if err := os.Symlink(node, filepath.Join(onlyNode, "node")); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EndpointEnv, "")
	for _, tt := range []struct {
		kind       Kind
		path, want string
	}{
		{Dynalite, t.TempDir(), "dynalite needs Node.js: node is not on PATH"},
		{DynamoDBLocal, t.TempDir(), "dynamodb-local needs Node.js: node is not on PATH"},
		{DynamoDBLocal, onlyNode, "dynamodb-local needs java: it is not on PATH; DynamoDB Local runs on Java 17 or later"},
		{Dynalite, onlyNode, "dynalite needs npm, once, to install the dynalite package into "},
	} {
		t.Run(string(tt.kind)+" with "+filepath.Base(tt.path), func(t *testing.T) {
			t.Setenv("PATH", tt.path)
			t.Setenv("XDG_CACHE_HOME", t.TempDir()) // nothing installed yet
			s, err := Start(tt.kind)
			if err == nil {
				s.Stop()
				t.Fatal("started")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("err = %q; want one line starting %q", msg, tt.want)
			}
		})
	}
}

func TestNpmError(t *testing.T) {
	for _, tt := range []struct{ out, want string }{
		{`npm error code ECONNREFUSED
npm error syscall connect
npm error errno ECONNREFUSED
npm error FetchError: request to http://127.0.0.1:1/wrappy failed, reason: connect ECONNREFUSED 127.0.0.1:1
npm error     at ClientRequest.<anonymous> (index.js:130:14)
npm error A complete log of this run can be found in: /root/.npm/_logs/debug-0.log
`, "FetchError: request to http://127.0.0.1:1/wrappy failed, reason: connect ECONNREFUSED 127.0.0.1:1"},
		{"npm ERR! code EUSAGE\nnpm ERR! The `npm ci` command can only install with an existing package-lock.json\n",
			"The `npm ci` command can only install with an existing package-lock.json"},
		{"something else\nentirely\n", "entirely"},
	} {
		if got := npmError([]byte(tt.out)); got != tt.want {
			t.Errorf("npmError(%q) = %q; want %q", tt.out, got, tt.want)
		}
	}
}
