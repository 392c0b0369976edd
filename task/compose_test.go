package task

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHarborComposeTask(t *testing.T) {
	specs, err := Load("testdata/harbor-compose/kv-counter")
	require.NoError(t, err)
	require.Len(t, specs, 1)
	s := specs[0]
	require.Equal(t, "forkline/debian", s.Image, "main's image is task.toml's docker_image")
	require.Equal(t, "7000", s.Env["KV_PORT"], "main's environment from the compose file")
	c := s.Compose
	require.NotNil(t, c)
	require.Equal(t, "environment/docker-compose.yaml", c.File)
	require.Equal(t, []string{"kv", "audit"}, c.ServiceNames(), "audit depends on kv, so kv starts first")
	kv, audit := c.Services[0], c.Services[1]
	require.Equal(t, "forkline/busybox", kv.Image)
	require.Contains(t, kv.Command[2], `case "$op" in`, "compose's $$ is a literal $")
	require.NotNil(t, kv.Health)
	require.Equal(t, []string{"CMD-SHELL", "echo GET | nc 127.0.0.1 7000 | grep -q '[0-9]'"}, kv.Health.Test)
	require.Equal(t, Duration(time.Second), kv.Health.Interval)
	require.Equal(t, 30, kv.Health.Retries)
	require.Equal(t, map[string]string{"kv": ServiceHealthy}, audit.DependsOn)

	// The services are part of the task's identity.
	other := s
	oc := *c
	oc.Services = append([]Service(nil), c.Services...)
	oc.Services[0].Image = "forkline/debian"
	other.Compose = &oc
	require.NotEqual(t, s.Hash(), other.Hash())
}

func TestHarborComposeRefusals(t *testing.T) {
	write := func(t *testing.T, toml, compose string) string {
		dir := filepath.Join(t.TempDir(), "a-task")
		files := map[string]string{"environment/db.env": "A=b\n", "environment/seed/counter": "41\n", "environment/db/Dockerfile": "FROM forkline/busybox\n", "task.toml": "[environment]\ndocker_image = \"forkline/debian\"\n" + toml, "instruction.md": "do it", "tests/test.sh": "exit 0", "environment/docker-compose.yaml": compose}
		for name, content := range files {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
		outside := t.TempDir()
		require.NoError(t, os.Symlink(outside, filepath.Join(dir, "environment", "out")))
		if strings.Contains(t.Name(), "link_out_inside") {
			require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "environment", "seed", "passwd")))
		}
		return dir
	}
	const db = "services:\n  db:\n    image: forkline/busybox\n"
	for _, c := range []struct {
		name, toml, compose string
		want                []string
	}{
		{"fine", "", db, nil},
		{"unknown service key", "", db + "    colour: blue\n", []string{"docker-compose.yaml:4:5: field services.db.colour: not a key of the compose specification"}},
		{"a cycle", "", "services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n", []string{"docker-compose.yaml: dependency cycle detected: a -> b -> a"}},
		{"an undefined dependency", "", db + "    depends_on: [cache]\n", []string{`service "db" depends on undefined service "cache"`}},
		{"host ports", "", db + "    ports: [\"8080:80\"]\n", []string{"docker-compose.yaml:4:5: field services.db.ports: not supported: host ports are not published"}},
		{"a host path volume", "", db + "    volumes: [\"/etc:/host-etc\"]\n", []string{"docker-compose.yaml:4:15: field services.db.volumes.0: /etc is outside the task's folder"}},
		{"a home volume", "", db + "    volumes:\n      - ~/.ssh:/keys\n", []string{"docker-compose.yaml:5:9: field services.db.volumes.0:", "is outside the task's folder"}},
		{"a volume above the task", "", db + "    volumes: [\"../../x:/x\"]\n", []string{"field services.db.volumes.0:", "is outside the task's folder"}},
		{"a volume of the task", "", db + "    volumes: [\"./seed:/seed:ro\", \"../tests/test.sh:/t.sh\"]\n", nil},
		{"a missing volume source", "", db + "    volumes: [\"./nope:/seed\"]\n", []string{"field services.db.volumes.0: environment/nope is not in the task's folder"}},
		{"a volume linked out", "", db + "    volumes: [\"./out:/seed\"]\n", []string{"field services.db.volumes.0: environment/out leads outside the task's folder (a symlink"}},
		{"a link out inside a copied folder", "", db + "    volumes: [\"./seed:/seed\"]\n", []string{"field services.db.volumes.0: environment/seed/", "leads outside the task's folder"}},
		{"named and anonymous volumes", "", db + "    volumes: [\"data:/var/lib/db\", \"/cache\"]\nvolumes:\n  data:\n", nil},
		{"an external volume", "", db + "    volumes: [\"data:/var/lib/db\"]\nvolumes:\n  data:\n    external: true\n", []string{"field volumes.data.external: not supported"}},
		{"a shared volume", "", db + "    volumes: [\"data:/d\"]\n  web:\n    image: x\n    volumes: [\"data:/d\"]\nvolumes:\n  data:\n", []string{"volume data is also", "shared between services is not supported"}},
		{"a tmpfs", "", db + "    volumes:\n      - type: tmpfs\n        target: /t\n", []string{"field services.db.volumes.0: a tmpfs volume is not supported"}},
		{"main's volumes", "", db + "  main:\n    volumes: [\"./seed:/seed\"]\n", []string{"field services.main.volumes: not supported: main's files are its image's"}},
		{"a build", "", "services:\n  db:\n    build: ./db\n", nil},
		{"a build with args", "", "services:\n  db:\n    build:\n      context: db\n      dockerfile: Dockerfile\n      args:\n        A: \"1\"\n        B: two\n      target: final\n", nil},
		{"a build context under CONTEXT_DIR", "", "services:\n  db:\n    build: ${CONTEXT_DIR}/db\n", nil},
		{"a build context above CONTEXT_DIR", "", "services:\n  db:\n    build: ${CONTEXT_DIR}/../..\n", []string{"docker-compose.yaml:3:5: field services.db.build:", "is outside the task's folder"}},
		{"a build context outside", "", "services:\n  db:\n    build:\n      context: ../..\n", []string{"docker-compose.yaml:4:7: field services.db.build.context:", "is outside the task's folder"}},
		{"an absolute build context", "", "services:\n  db:\n    build: /etc\n", []string{"docker-compose.yaml:3:5: field services.db.build: /etc is not a folder of the task"}},
		{"a remote build context", "", "services:\n  db:\n    build: https://github.com/x/y.git\n", []string{"field services.db.build: https://github.com/x/y.git is not a folder of the task"}},
		{"a build context linked out", "", "services:\n  db:\n    build: ./out\n", []string{"field services.db.build: environment/out leads outside the task's folder (a symlink"}},
		{"a build without a Dockerfile", "", "services:\n  db:\n    build: ./seed\n", []string{"docker-compose.yaml:3:5: field services.db.build:", "seed/Dockerfile is not a file"}},
		{"a Dockerfile outside the context", "", "services:\n  db:\n    build:\n      context: db\n      dockerfile: ../../task.toml\n", []string{"docker-compose.yaml:5:7: field services.db.build.dockerfile:", "\"..\" segment"}},
		{"build secrets", "", "services:\n  db:\n    build:\n      context: db\n      secrets: [s]\nsecrets:\n  s:\n    file: /etc/shadow\n", []string{"docker-compose.yaml:5:7: field services.db.build.secrets: not supported: build secrets are not supported"}},
		{"build ssh", "", "services:\n  db:\n    build:\n      context: db\n      ssh: [default]\n", []string{"field services.db.build.ssh: not supported: a build's ssh agent"}},
		{"a build network", "", "services:\n  db:\n    build:\n      context: db\n      network: host\n", []string{"field services.db.build.network: not supported: a service's build runs on the engine's default build network"}},
		{"a build arg from the host", "", "services:\n  db:\n    build:\n      context: db\n      args: [HOME]\n", []string{"docker-compose.yaml:5:14: field services.db.build.args.0: HOME has no value"}},
		{"a build arg without a value", "", "services:\n  db:\n    build:\n      context: db\n      args:\n        HOME:\n", []string{"field services.db.build.args.HOME: has no value"}},
		{"a build arg of a variable", "", "services:\n  db:\n    build:\n      context: db\n      args:\n        A: ${CONTEXT_DIR}\n", []string{"field services.db.build.args.A:", "is not a literal value"}},
		{"a build arg with a literal dollar", "", "services:\n  db:\n    build:\n      context: db\n      args:\n        A: a$$b\n", nil},
		{"build secrets", "", db + "secrets:\n  s:\n    file: /etc/shadow\n", []string{"field secrets: not supported: build and run secrets"}},
		{"privileged", "", db + "    privileged: true\n", []string{"field services.db.privileged: not supported: privileged containers are not allowed"}},
		{"networks", "", db + "    networks: [back]\nnetworks:\n  back: {}\n", []string{"not supported: a compose environment runs on one network of its own"}},
		{"a host variable", "", "services:\n  db:\n    image: ${HOME}/x\n", []string{"variable ${HOME} is not set", "never the host's environment"}},
		{"a variable with a default", "", "services:\n  db:\n    image: ${DB_IMAGE:-forkline/busybox}\n", nil},
		{"main's command", "", db + "  main:\n    command: [\"sleep\", \"1\"]\n", []string{"field services.main.command: not supported: main's command is forkline's"}},
		{"main's image twice", "", db + "  main:\n    image: forkline/busybox\n", []string{"field services.main.image: main's image is already given"}},
		{"waiting for main", "", db + "    depends_on: [main]\n", []string{"field services.db.depends_on.main: main starts after every other service"}},
		{"healthy without a healthcheck", "", db + "  web:\n    image: x\n    depends_on:\n      db:\n        condition: service_healthy\n", []string{"waits for db to be healthy, and db has no healthcheck"}},
		{"a one-shot condition", "", db + "  web:\n    image: x\n    depends_on:\n      db:\n        condition: service_completed_successfully\n", []string{"service_completed_successfully is not supported"}},
		{"an env file outside", "", db + "    env_file: [../../../etc/passwd]\n", []string{"field services.db.env_file", "outside the task's environment folder"}},
		{"a public network", "[environment]\nnetwork_mode = \"public\"\n", db, []string{"a compose environment runs on a network of its own with no route out"}},
		{"an env file inside", "", db + "    env_file: [db.env]\n", nil},
		{"an absolute env file", "", db + "    env_file: /etc/passwd\n", []string{"field services.db.env_file: /etc/passwd is outside"}},
		{"include", "", "include: [other.yaml]\n" + db, []string{"docker-compose.yaml:1:1: field include: not supported"}},
		{"extends", "", db + "    extends: {file: ../x.yaml, service: y}\n", []string{"field services.db.extends: not supported"}},
		{"deploy placement", "", db + "    deploy:\n      replicas: 2\n", []string{"field services.db.deploy.replicas: only deploy.resources.limits"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			toml := c.toml
			if toml != "" {
				// [environment] is opened by write already.
				toml = toml[len("[environment]\n"):]
			}
			_, err := Load(write(t, toml, c.compose))
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrSpec)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// A service built from the task's Dockerfile, seeded from the task's
// files: the build's context and the copy are folders of the task, their
// contents in the task's hash, their place on the host not.
func TestHarborComposeBuildAndVolume(t *testing.T) {
	const src = "testdata/harbor-compose-build/seeded-kv"
	specs, err := Load(src)
	require.NoError(t, err)
	require.Len(t, specs, 1)
	s := specs[0]
	require.NotNil(t, s.Compose)
	require.Equal(t, []string{"kv"}, s.Compose.ServiceNames())
	kv := s.Compose.Services[0]
	require.Empty(t, kv.Image, "the image is the build's")
	require.NotNil(t, kv.Build)
	abs, err := filepath.Abs(filepath.Join(src, "environment", "kv"))
	require.NoError(t, err)
	require.Equal(t, abs, kv.Build.Context)
	require.Equal(t, map[string]string{"VERSION": "v7"}, kv.Build.Args)
	require.NotEmpty(t, kv.Build.ContextDigest)
	require.Len(t, kv.Copies, 1)
	c := kv.Copies[0]
	require.Equal(t, "environment/seed", c.Path)
	require.Equal(t, "/var/lib/kv/seed", c.Target)
	require.Equal(t, filepath.Join(filepath.Dir(abs), "seed"), c.Source)

	// The same task elsewhere has the same hash; an edited seed does not.
	moved := filepath.Join(t.TempDir(), "seeded-kv")
	require.NoError(t, os.CopyFS(moved, os.DirFS(src)))
	again, err := Load(moved)
	require.NoError(t, err)
	require.Equal(t, s.Hash(), again[0].Hash())
	require.NoError(t, os.WriteFile(filepath.Join(moved, "environment", "seed", "counter"), []byte("40\n"), 0o644))
	edited, err := Load(moved)
	require.NoError(t, err)
	require.NotEqual(t, s.Hash(), edited[0].Hash())
	require.NoError(t, os.WriteFile(filepath.Join(moved, "environment", "seed", "counter"), []byte("41\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(moved, "environment", "kv", "handle.sh"), []byte("echo\n"), 0o644))
	edited, err = Load(moved)
	require.NoError(t, err)
	require.NotEqual(t, s.Hash(), edited[0].Hash())
}
