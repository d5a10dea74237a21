package spawnd_test

// The README's examples, run against the test daemon with their output
// checked; TestReadmeShowsOnlyTheseExamples keeps the two in step.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"spawnd.dev/go/spawnd"
)

func Example() {
	ctx := context.Background()
	// The socket from $SPAWND_SOCKET; "" dials spawnd.DefaultSocket.
	c, err := spawnd.Dial(ctx, os.Getenv("SPAWND_SOCKET"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	st, err := c.Run(ctx, spawnd.SpawnOpParams{
		Connector: os.Getenv("SPAWND_CONNECTOR"),
		Op:        "sh",
		Args:      map[string]string{"script": "echo hello"},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Exit is either an exit code or the signal that killed the program.
	if code, exited := st.Exit.Exited(); exited {
		fmt.Printf("%s %d %s", st.State, code, st.Stdout)
	} else if signal, signalled := st.Exit.Signalled(); signalled {
		fmt.Printf("%s %s", st.State, signal)
	}
	// Output: exited 0 hello
}

func ExampleClient_ConnectorsStatus() {
	ctx := context.Background()
	c, err := spawnd.Dial(ctx, os.Getenv("SPAWND_SOCKET"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	status, err := c.ConnectorsStatus(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, op := range status.Connectors[os.Getenv("SPAWND_CONNECTOR")].Operations {
		if op.Name != "sh" {
			continue
		}
		for _, p := range op.Params {
			fmt.Printf("%s: %s (%s, required %v)\n", op.Name, p.Name, p.Kind, p.Required)
		}
	}
	// Output: sh: script (string, required true)
}

func ExampleDenial() {
	ctx := context.Background()
	c, err := spawnd.Dial(ctx, os.Getenv("SPAWND_SOCKET"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.SpawnOp(ctx, spawnd.SpawnOpParams{
		Connector: os.Getenv("SPAWND_CONNECTOR"),
		Op:        "sh",
		Args:      map[string]string{"script": "true", "color": "red"},
	})
	var denial *spawnd.Denial
	if errors.As(err, &denial) {
		fmt.Println(errors.Is(err, spawnd.ErrDenied), denial.Reason, denial.AuditID != "")
	}
	// Output: true arg_unknown true
}

func ExampleClient_Notifications() {
	ctx := context.Background()
	c, err := spawnd.Dial(ctx, os.Getenv("SPAWND_SOCKET"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{
		Connector: os.Getenv("SPAWND_CONNECTOR"),
		Op:        "sh",
		Args:      map[string]string{"script": "echo one; sleep 0.1; echo two"},
		Notify:    true,
	})
	if err != nil {
		log.Fatal(err)
	}
	var stdout strings.Builder
	for n := range c.Notifications(s.Handle) {
		switch n.Method {
		case spawnd.MethodSpawnOutput:
			if n.Which == spawnd.Stdout {
				stdout.Write(n.Data)
			}
		case spawnd.MethodSpawnExited:
			fmt.Printf("%s after %q\n", n.Status.Exit, stdout.String())
		}
	}
	// Output: exit code 0 after "one\ntwo\n"
}

func ExampleClient_NewStdinWriter() {
	ctx := context.Background()
	c, err := spawnd.Dial(ctx, os.Getenv("SPAWND_SOCKET"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{
		Connector:   os.Getenv("SPAWND_CONNECTOR"),
		Op:          "sh",
		Args:        map[string]string{"script": "wc -c"},
		StdinStream: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	// 3 MiB, more than a frame holds: the writer sends it in frames.
	stdin := c.NewStdinWriter(ctx, s.Handle)
	if _, err := io.Copy(stdin, strings.NewReader(strings.Repeat("x", 3<<20))); err != nil {
		log.Fatal(err)
	}
	if err := stdin.Close(); err != nil {
		log.Fatal(err)
	}
	st, err := c.Wait(ctx, s.Handle)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(st.Stdout)
	// Output: 3145728
}

func ExampleClient_SpawnAttach() {
	ctx := context.Background()
	first, err := spawnd.Dial(ctx, os.Getenv("SPAWND_SOCKET"))
	if err != nil {
		log.Fatal(err)
	}
	s, err := first.SpawnOp(ctx, spawnd.SpawnOpParams{
		Connector: os.Getenv("SPAWND_CONNECTOR"),
		Op:        "sh",
		Args:      map[string]string{"script": "sleep 1; echo done"},
		Lease:     time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	first.Close() // the program keeps running for up to a minute

	second, err := spawnd.Dial(ctx, os.Getenv("SPAWND_SOCKET"))
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close()
	if _, err := second.SpawnAttach(ctx, s.Handle, s.Token); err != nil {
		log.Fatal(err)
	}
	st, err := second.Wait(ctx, s.Handle)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(st.Stdout)
	// Output: done
}
