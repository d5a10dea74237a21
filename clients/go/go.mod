module spawnd.dev/go/spawnd

go 1.19
