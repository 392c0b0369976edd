package task

import (
	"os"
	"path/filepath"
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
		files := map[string]string{"environment/db.env": "A=b\n", "task.toml": "[environment]\ndocker_image = \"forkline/debian\"\n" + toml, "instruction.md": "do it", "tests/test.sh": "exit 0", "environment/docker-compose.yaml": compose}
		for name, content := range files {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
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
		{"volumes", "", db + "    volumes: [\"/etc:/host-etc\"]\n", []string{"field services.db.volumes: not supported: volumes are not supported"}},
		{"a build", "", "services:\n  db:\n    build: .\n", []string{"field services.db.build: not supported: building a service's image"}},
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
